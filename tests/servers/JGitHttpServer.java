// A smart-HTTP git server made of JGit's own protocol implementation (org.eclipse.jgit.http.server
// GitServlet: upload-pack and receive-pack written in Java, no git process involved) inside an
// embedded Jetty 9, both from Debian (libjgit-java, libjetty9-java). Used by tests/tests/interop.rs.
//
//   java -cp JARS tests/servers/JGitHttpServer.java PORT BASE_DIR
//
// serves every repository under BASE_DIR at http://127.0.0.1:PORT/git/NAME.git (no
// authentication; receive-pack is allowed where the repository sets http.receivepack = true).
// Prints "listening on PORT" once it accepts connections; stops when killed.

import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;
import org.eclipse.jgit.http.server.GitServlet;

public class JGitHttpServer {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: JGitHttpServer PORT BASE_DIR");
            System.exit(2);
        }
        int port = Integer.parseInt(args[0]);
        Server server = new Server();
        ServerConnector connector = new ServerConnector(server);
        connector.setHost("127.0.0.1");
        connector.setPort(port);
        server.addConnector(connector);

        ServletContextHandler context = new ServletContextHandler();
        context.setContextPath("/");
        ServletHolder git = new ServletHolder(new GitServlet());
        git.setInitParameter("base-path", args[1]);
        git.setInitParameter("export-all", "true");
        context.addServlet(git, "/git/*");
        server.setHandler(context);

        server.start();
        System.out.println("listening on " + port);
        System.out.flush();
        server.join();
    }
}
