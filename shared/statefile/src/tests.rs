//! The rules, field by field: each wrong type is refused with a sentence naming the field, and
//! what Terraform reads is accepted. `tests/statefile_reference.rs` checks the same decision
//! against an independent reading of Terraform's decoder on random states.

use super::*;

/// A provider address as Terraform writes it, as JSON.
const P: &str = r#""provider[\"registry.terraform.io/hashicorp/null\"]""#;

const GOOD: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":3,"lineage":"l","outputs":{"a":{"value":1,"type":"number"}},"resources":[{"mode":"managed","type":"t","name":"n","provider":"provider[\"registry.terraform.io/hashicorp/null\"]","instances":[{"schema_version":0,"attributes":{"id":"1"},"private":"eyJ4IjoxfQ==","dependencies":["t.m"]}]}],"check_results":null}"#;

/// `GOOD` with the top-level `field` set to the JSON text `value`.
fn with(field: &str, value: &str) -> String {
    let mut state: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(GOOD).expect("GOOD is JSON");
    state.remove(field);
    let mut text = serde_json::to_string(&state).expect("JSON");
    text.insert_str(1, &format!("\"{field}\":{value},"));
    text
}

fn refused(body: &str) -> StateError {
    match read(body.as_bytes()) {
        Ok(file) => panic!("accepted {body}: {file:?}"),
        Err(e) => e,
    }
}

#[test]
fn a_state_terraform_writes_is_read_with_its_header() {
    let file = read(GOOD.as_bytes()).expect("a state");
    assert_eq!(file.form, Form::State { version: 4 });
    assert_eq!(file.serial, Some(3));
    assert_eq!(file.lineage.as_deref(), Some("l"));
    assert_eq!(file.terraform_version.as_deref(), Some("1.15.5"));
    assert!(!file.sops_key);
}

#[test]
fn every_header_field_of_a_wrong_type_is_refused_by_name() {
    let cases: &[(&str, &str, &str)] = &[
        ("serial", r#""one""#, "a string"),
        ("serial", "-1", "a negative number"),
        ("serial", "1.5", "not a whole number"),
        ("serial", "1.0", "not a whole number"),
        ("serial", "1e2", "not a whole number"),
        ("serial", "-0", "not a whole number"),
        ("serial", "18446744073709551616", "not a whole number"),
        ("serial", "true", "true or false"),
        ("serial", "[1]", "an array"),
        ("lineage", "5", "the number 5"),
        ("lineage", "{}", "an object"),
        ("terraform_version", "1.15", "a number"),
        ("terraform_version", r#""banana""#, "not a version"),
        ("outputs", "[]", "an array"),
        ("outputs", r#""x""#, "a string"),
        ("resources", "{}", "an object"),
        ("resources", "5", "the number 5"),
        ("check_results", "{}", "an object"),
    ];
    for (field, value, found) in cases {
        let body = with(field, value);
        let e = refused(&body);
        let sentence = e.to_string();
        assert!(
            matches!(&e, StateError::Field { place, .. } if place == field),
            "{body}: {sentence}"
        );
        assert!(sentence.contains(found), "{body}: {sentence}");
        assert!(!sentence.contains('\n'), "one sentence: {sentence}");
    }
}

#[test]
fn the_version_is_4_or_legacy_3() {
    for (value, found) in [
        ("5", "the number 5"),
        (r#""4""#, "a string"),
        ("4.0", "not a whole number"),
        ("-4", "a negative number"),
        ("0", "the number 0"),
        ("2", "the number 2"),
        ("[4]", "an array"),
    ] {
        let e = refused(&with("version", value));
        assert!(
            matches!(&e, StateError::Version { found: f } if f.contains(found)),
            "{value}: {e}"
        );
        assert!(e.to_string().contains("not a Terraform state"), "{e}");
    }
    assert_eq!(refused(&with("version", "null")), StateError::NoVersion);
    assert_eq!(refused("{}"), StateError::NoVersion);
}

#[test]
fn the_extremes_terraform_reads_are_accepted() {
    let max = read(with("serial", "18446744073709551615").as_bytes()).expect("max serial");
    assert_eq!(max.serial, Some(u64::MAX));
    // Go leaves a field it reads null into as it was: null is absent.
    for field in [
        "serial",
        "lineage",
        "terraform_version",
        "outputs",
        "resources",
    ] {
        read(with(field, "null").as_bytes()).unwrap_or_else(|e| panic!("{field}: null: {e}"));
    }
    let bare = read(br#"{"version":4}"#).expect("a bare state");
    assert_eq!((bare.serial, bare.lineage), (None, None));
    // Go matches keys without regard to case: "Serial" is read, and so is judged.
    assert_eq!(
        read(br#"{"version":4,"Serial":9}"#).unwrap().serial,
        Some(9)
    );
    assert!(matches!(
        refused(r#"{"version":4,"SERIAL":"9"}"#),
        StateError::Field { .. }
    ));
    assert!(matches!(
        refused("{\"version\":4,\"\u{017F}erial\":\"9\"}"),
        StateError::Field { .. }
    ));
    assert_eq!(
        refused(r#"{"version":4,"serial":1,"Serial":2}"#),
        StateError::Duplicate("serial")
    );
}

#[test]
fn elements_are_checked_as_deep_as_the_decoder_goes() {
    for (field, value, place) in [
        ("resources", "[5]", "resources[0]"),
        ("resources", r#"[{"mode":1}]"#, "resources[0].mode"),
        (
            "resources",
            r#"[{"mode":"managed","instances":[{"schema_version":-1}]}]"#,
            "resources[0].instances[0].schema_version",
        ),
        (
            "resources",
            r#"[{"instances":[{"private":"not base64!"}]}]"#,
            "resources[0].instances[0].private",
        ),
        (
            "resources",
            r#"[{"instances":[{"dependencies":[1]}]}]"#,
            "resources[0].instances[0].dependencies[0]",
        ),
        (
            "resources",
            r#"[{"instances":[{"attributes_flat":{"a":1}}]}]"#,
            "resources[0].instances[0].attributes_flat[\"a\"]",
        ),
        ("outputs", r#"{"o":[]}"#, "outputs[\"o\"]"),
        (
            "outputs",
            r#"{"o":{"sensitive":"yes"}}"#,
            "outputs[\"o\"].sensitive",
        ),
        (
            "check_results",
            r#"[{"objects":[{"failure_messages":"no"}]}]"#,
            "check_results[0].objects[0].failure_messages",
        ),
    ] {
        let e = refused(&with(field, value));
        assert!(
            matches!(&e, StateError::Field { place: p, .. } if p == place),
            "{value}: {e}"
        );
    }
    // What the decoder keeps raw (attributes, private as bytes) may be any JSON.
    read(
        with(
            "resources",
            &format!(
                r#"[{{"mode":"managed","type":"t","name":"n","provider":{P},"instances":[{{"attributes":[1,{{"x":null}}],"private":[1,2]}}]}}]"#
            ),
        )
        .as_bytes(),
    )
    .expect("raw values");
}

#[test]
fn a_legacy_v3_state_is_read_with_its_own_types() {
    let v3 = r#"{"version":3,"terraform_version":"0.11.14","serial":9223372036854775807,"lineage":"l","modules":[{"path":["root"],"outputs":{},"resources":{"null_resource.a":{"type":"null_resource","primary":{"id":"1","attributes":{"id":"1"}}}}}]}"#;
    let file = read(v3.as_bytes()).expect("a v3 state");
    assert_eq!(file.form, Form::State { version: 3 });
    // Go int64: one more is out of range.
    let over = v3.replace("9223372036854775807", "9223372036854775808");
    assert!(refused(&over).to_string().contains("9223372036854775807"));
    assert!(refused(r#"{"version":3,"modules":{}}"#)
        .to_string()
        .contains("\"modules\" is an object"));
    for (from, to, place) in [
        (r#""path":["root"]"#, r#""path":"root""#, "modules[0].path"),
        (r#""id":"1","#, r#""id":1,"#, "primary.id"),
    ] {
        let e = refused(&v3.replacen(from, to, 1));
        assert!(e.to_string().contains(place), "{from}: {e}");
    }
    // v4 fields mean nothing to the v3 reader, and v3 fields nothing to the v4 reader.
    read(br#"{"version":3,"resources":5}"#).expect("ignored by the v3 reader");
    read(br#"{"version":4,"modules":5}"#).expect("ignored by the v4 reader");
}

#[test]
fn an_opentofu_envelope_is_accepted_as_it_is() {
    let envelope = r#"{"serial":7,"lineage":"tofu","meta":{"key_provider.pbkdf2.main":"eyJzYWx0IjoiMDEyMyJ9"},"encrypted_data":"q83vEjRWeJA=","encryption_version":"v0"}"#;
    let file = read(envelope.as_bytes()).expect("an envelope");
    assert_eq!(file.form, Form::ClientEncrypted);
    assert_eq!(
        (file.serial, file.lineage.as_deref()),
        (Some(7), Some("tofu"))
    );
    for (from, to, place) in [
        (
            r#""encryption_version":"v0""#,
            r#""encryption_version":"""#,
            "encryption_version",
        ),
        (
            r#""encryption_version":"v0""#,
            r#""encryption_version":0"#,
            "encryption_version",
        ),
        (r#""encrypted_data":"q83vEjRWeJA=","#, "", "encrypted_data"),
        (r#""q83vEjRWeJA=""#, r#""q83v*""#, "encrypted_data"),
        (r#""q83vEjRWeJA=""#, r#""""#, "encrypted_data"),
        (
            r#""eyJzYWx0IjoiMDEyMyJ9""#,
            "5",
            "meta[\"key_provider.pbkdf2.main\"]",
        ),
        (r#""serial":7"#, r#""serial":-7"#, "serial"),
        (r#""serial":7"#, r#""serial":"7""#, "serial"),
        (r#""lineage":"tofu""#, r#""lineage":7"#, "lineage"),
    ] {
        let e = refused(&envelope.replacen(from, to, 1));
        assert!(
            matches!(&e, StateError::Envelope { place: p, .. } if p == place),
            "{to}: {e}"
        );
    }
    assert_eq!(
        refused(&envelope.replacen("{", r#"{"version":4,"#, 1)),
        StateError::Ambiguous
    );
    // Without OpenTofu's sigil it is judged as a state: `encrypted_data` alone is no envelope.
    assert_eq!(
        refused(r#"{"encrypted_data":"q83vEjRWeJA=","serial":1}"#),
        StateError::NoVersion
    );
}

#[test]
fn bodies_that_are_not_json_objects_are_refused() {
    for body in [
        "",
        "null",
        "[]",
        "42",
        "\"state\"",
        "\u{feff}{\"version\":4}",
    ] {
        assert_eq!(refused(body), StateError::NotAnObject, "{body:?}");
    }
    for body in [
        r#"{"version":4"#,
        r#"{"version":4} x"#,
        r#"{"version":4,"serial":1e999}"#,
    ] {
        assert!(matches!(refused(body), StateError::NotJson(_)), "{body}");
    }
}

/// `resources` holding one resource of `mode` with `instances` (JSON).
fn resource(mode: &str, instances: &str) -> String {
    with(
        "resources",
        &format!(
            r#"[{{"mode":"{mode}","type":"null_resource","name":"a","provider":{P},"instances":{instances}}}]"#
        ),
    )
}

#[test]
fn what_terraform_checks_after_decoding_is_checked_too() {
    for (body, place, says) in [
        (resource("bogus", "[]"), "resources[0].mode", "\"bogus\""),
        (resource("", "[]"), "resources[0].mode", "\"\""),
        (with("resources", "[{}]"), "resources[0].mode", "\"\""),
        (with("resources", "[null]"), "resources[0].mode", "\"\""),
        (
            resource("managed", r#"[{"status":"gone"}]"#),
            "resources[0].instances[0].status",
            "\"gone\"",
        ),
        (
            resource("managed", r#"[{"deposed":"abc"}]"#),
            "resources[0].instances[0].deposed",
            "\"abc\"",
        ),
        (
            resource("managed", r#"[{"index_key":true}]"#),
            "resources[0].instances[0].index_key",
            "true or false",
        ),
        (
            resource("managed", r#"[{"index_key":[0]}]"#),
            "resources[0].instances[0].index_key",
            "an array",
        ),
        (
            resource("managed", r#"[{"index_key":1},{"index_key":1.0}]"#),
            "resources[0].instances[1]",
            "already",
        ),
        (
            resource("managed", r#"[{},{}]"#),
            "resources[0].instances[1]",
            "already",
        ),
        (
            resource(
                "managed",
                r#"[{"deposed":"00000001"},{"deposed":"00000001"}]"#,
            ),
            "resources[0].instances[1]",
            "already",
        ),
    ] {
        let e = refused(&body);
        let sentence = e.to_string();
        assert!(
            sentence.contains(&format!("\"{place}\"")) && sentence.contains(says),
            "{body}: {sentence}"
        );
    }
    for instances in [
        r#"[{"index_key":0},{"index_key":"0"},{"index_key":1.5},{"status":"tainted"}]"#,
        r#"[{},{"deposed":"00000001"},{"deposed":"00000002"}]"#,
    ] {
        read(resource("managed", instances).as_bytes())
            .unwrap_or_else(|e| panic!("{instances}: {e}"));
    }
    read(resource("data", "[]").as_bytes()).expect("a data resource");
}

/// One resource of `fields` (JSON members) with one instance of `instance` (JSON members).
fn resource_with(fields: &str, instance: &str) -> String {
    with(
        "resources",
        &format!(
            r#"[{{"mode":"managed","type":"null_resource","name":"a","provider":{P}{fields},"instances":[{{"schema_version":0{instance}}}]}}]"#
        ),
    )
}

#[test]
fn addresses_are_read_as_terraform_reads_them() {
    for (body, place) in [
        (
            resource_with(r#","module":"module.a.b""#, ""),
            "resources[0].module",
        ),
        (
            resource_with(r#","module":"module.a[1.5]""#, ""),
            "resources[0].module",
        ),
        (
            resource_with(r#","module":"foo.a""#, ""),
            "resources[0].module",
        ),
        (
            with(
                "resources",
                r#"[{"mode":"managed","type":"t","name":"n","instances":[]}]"#,
            ),
            "resources[0].provider",
        ),
        (
            with(
                "resources",
                r#"[{"mode":"managed","type":"t","name":"n","provider":"aws"}]"#,
            ),
            "resources[0].provider",
        ),
        (
            with(
                "resources",
                r#"[{"mode":"managed","type":"t","name":"n","provider":"module[0].provider[\"x\"]"}]"#,
            ),
            "resources[0].provider",
        ),
        (
            with(
                "resources",
                r#"[{"mode":"managed","type":"t","name":"n","provider":"provider[\"registry.terraform.io/-/aws\"]"}]"#,
            ),
            "resources[0].provider",
        ),
        (
            resource_with("", r#","dependencies":["aws_instance.a[0]"]"#),
            "resources[0].instances[0].dependencies[0]",
        ),
        (
            resource_with("", r#","dependencies":["var.x"]"#),
            "resources[0].instances[0].dependencies[0]",
        ),
        (
            resource_with("", r#","dependencies":[null]"#),
            "resources[0].instances[0].dependencies[0]",
        ),
        (
            resource_with("", r#","provider":"provider.aws""#),
            "resources[0].instances[0].provider",
        ),
        (
            resource_with("", r#","depends_on":["count.x"]"#),
            "resources[0].instances[0].depends_on[0]",
        ),
    ] {
        let e = refused(&body);
        assert!(
            e.to_string().contains(&format!("\"{place}\"")),
            "{body}: {e}"
        );
    }
    for (fields, instance) in [
        (r#","module":"module.a[0].module.b[\"k\"]""#, ""),
        (
            "",
            r#","dependencies":["data.aws_ami.u","module.m[0].aws_instance.a"]"#,
        ),
        ("", r#","depends_on":["aws_instance.a[0]"]"#),
        (
            "",
            r#","provider":"provider[\"registry.opentofu.org/hashicorp/null\"]""#,
        ),
    ] {
        read(resource_with(fields, instance).as_bytes())
            .unwrap_or_else(|e| panic!("{fields} {instance}: {e}"));
    }
    // The legacy provider address of a state Terraform 0.12 upgraded.
    read(
        with(
            "resources",
            r#"[{"mode":"managed","type":"t","name":"n","provider":"provider.aws"}]"#,
        )
        .as_bytes(),
    )
    .expect("a legacy provider address");
}

#[test]
fn sensitive_paths_outputs_and_check_results_read_as_terraform_reads_them() {
    let sensitive = |paths: &str| resource_with("", &format!(r#","sensitive_attributes":{paths}"#));
    for good in [
        "null",
        "[]",
        r#"[[{"type":"get_attr","value":"password"}],null,[]]"#,
        r#"[[{"TYPE":"get_attr","value":null}]]"#,
        r#"[[{"type":"index","value":{"value":0,"type":"number"}}]]"#,
        r#"[[{"type":"index","value":null}]]"#,
    ] {
        read(sensitive(good).as_bytes()).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    for bad in [
        "{}",
        "[1]",
        r#"[[{"type":"get_attr"}]]"#,
        r#"[[{"type":"get_attr","value":5}]]"#,
        r#"[[{"type":"GET_ATTR","value":"a"}]]"#,
        r#"[[{"type":"index","value":0}]]"#,
        r#"[[null]]"#,
        r#"[[{"type":5,"value":"a"}]]"#,
    ] {
        let e = refused(&sensitive(bad));
        assert!(e.to_string().contains("sensitive_attributes"), "{bad}: {e}");
    }
    for (outputs, place) in [
        (r#"{"o":{"value":1}}"#, "outputs[\"o\"].type"),
        (r#"{"o":{"type":"number"}}"#, "outputs[\"o\"].value"),
        (r#"{"o":null}"#, "outputs[\"o\"].type"),
        (r#"{"o":{"value":"x","type":"any"}}"#, "outputs[\"o\"].type"),
        (
            r#"{"o":{"value":"x","type":"number"}}"#,
            "outputs[\"o\"].value",
        ),
        (
            r#"{"o":{"value":{"a":1},"type":["object",{"a":"number"},["b"]]}}"#,
            "outputs[\"o\"].type",
        ),
        (
            r#"{"o":{"value":[1],"type":["tuple",["number","number"]]}}"#,
            "outputs[\"o\"].value",
        ),
    ] {
        let e = refused(&with("outputs", outputs));
        assert!(
            e.to_string().contains(&format!("\"{place}\"")),
            "{outputs}: {e}"
        );
    }
    read(with("outputs", r#"{"o":{"value":{"a":[1,"2"]},"type":["object",{"a":["list","number"]}]},"s":{"value":3,"type":"string","sensitive":true}}"#).as_bytes())
        .expect("values go-cty converts");
    for (checks, place) in [
        (
            r#"[{"object_kind":"resource","config_addr":"aws_instance.a[0]"}]"#,
            "check_results[0].config_addr",
        ),
        (
            r#"[{"object_kind":"output","config_addr":"output.o","objects":[{"object_addr":"output.o.x"}]}]"#,
            "check_results[0].objects[0].object_addr",
        ),
    ] {
        let e = refused(&with("check_results", checks));
        assert!(
            e.to_string().contains(&format!("\"{place}\"")),
            "{checks}: {e}"
        );
    }
    for checks in [
        r#"[{"object_kind":"resource","config_addr":"null_resource.a","status":"pass","objects":[{"object_addr":"null_resource.a[0]","status":"fail"}]}]"#,
        r#"[{"object_kind":"someday","config_addr":"anything at all"}]"#,
        r#"[{"object_kind":"var","config_addr":"module.m.var.v","objects":[{"object_addr":"module.m[1].var.v"}]}]"#,
    ] {
        read(with("check_results", checks).as_bytes()).unwrap_or_else(|e| panic!("{checks}: {e}"));
    }
}
