import textwrap

import pytest

from tools.stack_file import (
    Secret,
    StackFileError,
    parse_stack_yaml,
    read_stack_file,
    validate_project_name,
    validate_stack_name,
)

P = "verl-gke"


def cfg(body: str, project: str = P) -> dict:
    return parse_stack_yaml(textwrap.dedent(body), project, "Pulumi.dev.yaml")


def one(value_yaml: str):
    return cfg(f"config:\n  k: {value_yaml}\n")[f"{P}:k"]


# --- YAML 1.2-core-like scalars as yaml.v3 resolves them -------------------

@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n", "Yes", "OFF", "nULL", "tRUE"])
def test_yaml11_booleans_stay_strings(word):
    assert one(word) == word


@pytest.mark.parametrize("text,expected", [
    ("true", "true"), ("True", "true"), ("TRUE", "true"),
    ("false", "false"), ("FALSE", "false"),
    ("4", "4"), ("-7", "-7"), ("+12", "12"), ("0", "0"), ("-0", "0"),
    ("4.0", "4"), ("4.50", "4.5"), ("0.1", "0.1"), ("-0.0", "0"), ("1.", "1"), (".5", "0.5"),
    ("1e3", "1000"), ("1E3", "1000"), ("1.5e-3", "0.0015"), ("1e-7", "1e-7"),
    ("1e20", "100000000000000000000"), ("1e21", "1e+21"), ("123456789.0", "123456789"),
    ("100000000000000000000", "100000000000000000000"),       # > uint64 -> float64
    ("18446744073709551615", "18446744073709551615"),         # max uint64 stays exact
    ("18446744073709551616", "18446744073709552000"),         # float64 rounding
    ("9223372036854775807", "9223372036854775807"),
    ("0777", "511"), ("0o17", "15"), ("0x1F", "31"), ("0b101", "5"), ("-0x10", "-16"),
    ("08", "8"),                                               # bad octal -> float 8
    ("1_000", "1000"), ("1e400", "1e400"), ("0x", "0x"), (".", "."),
    ("~", ""), ("null", ""), ("Null", ""), ("NULL", ""), ("", ""),
    ("2024-01-02", "2024-01-02 00:00:00 +0000 UTC"), ("2024-1-2t3:04:05.50Z", "2024-01-02 03:04:05.5 +0000 UTC"),
    ("'2024-01-02'", "2024-01-02"), ("!!str 2024-01-02", "2024-01-02"), ("inf", "inf"), ("nan", "nan"),
    ("'4.0'", "4.0"), ('"true"', "true"), ("!!str 0777", "0777"), ("!!float 3", "3"),
    ("gpu-a100", "gpu-a100"), ("'a: b'", "a: b"),
])
def test_scalar_formatting(text, expected):
    assert one(text) == expected


@pytest.mark.parametrize("text", [".inf", "-.Inf", ".nan", "+.INF"])
def test_inf_and_nan_are_errors(text):
    with pytest.raises(StackFileError, match="unsupported value"):
        one(text)


def test_block_scalar_keeps_text():
    got = cfg("""\
        config:
          script: |
            echo 1
            echo 2
          folded: >-
            a
            b
        """)
    assert got[f"{P}:script"] == "echo 1\necho 2\n"
    assert got[f"{P}:folded"] == "a b"


# --- objects and lists -> JSON as Go's json.Marshal writes it -----------------

def test_nested_objects_to_sorted_compact_json():
    got = cfg("""\
        config:
          gpu:
            zone: us-central1-a
            count: 8
            ratio: 2.0
            spot: yes
            preempt: true
            tags: [b, a, 1e3, ~]
            note: "<x> & y"
          empty_map: {}
          empty_list: []
        """)
    assert got[f"{P}:gpu"] == (
        '{"count":8,"note":"\\u003cx\\u003e \\u0026 y","preempt":true,"ratio":2,'
        '"spot":"yes","tags":["b","a",1000,null],"zone":"us-central1-a"}')
    assert got[f"{P}:empty_map"] == "{}"
    assert got[f"{P}:empty_list"] == "[]"


def test_list_value_and_string_escapes():
    got = cfg('config:\n  l: ["tab\\there", "é", "q\\"", 1.5e-10, 1e21]\n')
    assert got[f"{P}:l"] == '["tab\\there","é","q\\"",1.5e-10,1e+21]'


def test_anchors_and_merge_keys():
    got = cfg("""\
        config:
          base: &b {a: 1, b: 2}
          derived:
            <<: *b
            b: 3
        """)
    assert got[f"{P}:derived"] == '{"a":1,"b":3}'


# --- secrets -----------------------------------------------------------------

def test_secure_value_is_secret():
    got = cfg("""\
        config:
          token:
            secure: v1:abc==
          notsecret: {secure: 1}
          twokeys: {secure: x, other: y}
          nested:
            user: me
            pw:
              secure: v1:zzz
        """)
    assert got[f"{P}:token"] == Secret("v1:abc==")
    assert str(got[f"{P}:token"]) == "[secret]"
    assert got[f"{P}:notsecret"] == '{"secure":1}'
    assert got[f"{P}:twokeys"] == '{"other":"y","secure":"x"}'
    assert got[f"{P}:nested"] == Secret('{"pw":{"secure":"v1:zzz"},"user":"me"}', is_object=True)


# --- keys --------------------------------------------------------------------

def test_namespacing():
    got = cfg("""\
        config:
          gpuNodes: 4
          gcp:project: my-proj
          gcp:config:region: us-central1
          other-proj:x: y
        """)
    assert got == {
        f"{P}:gpuNodes": "4",
        "gcp:project": "my-proj",
        "gcp:region": "us-central1",
        "other-proj:x": "y",
    }


@pytest.mark.parametrize("key", ["a:b:c", "a:b:c:d", "a::b"])
def test_bad_keys(key):
    with pytest.raises(StackFileError, match="could not parse .* as a configuration key"):
        cfg(f"config:\n  '{key}': 1\n")


def test_colliding_keys_rejected():
    with pytest.raises(StackFileError, match="both mean"):
        cfg(f"config:\n  gpuNodes: 1\n  {P}:gpuNodes: 2\n")
    with pytest.raises(StackFileError, match="both mean"):
        cfg("config:\n  gcp:region: a\n  gcp:config:region: b\n")


def test_duplicate_yaml_key_rejected_with_position():
    with pytest.raises(StackFileError, match=r"Pulumi.dev.yaml:3:3: mapping key 'a' already defined at line 2"):
        cfg("config:\n  a: 1\n  a: 2\n")


def test_non_string_key_rejected():
    """SimplifyMarshalledValue only walks a map with a non-string key: at the top it is an error; a
    config key that is not a string reaches config.ParseKey as its text; inside a value it is %v text
    (resource/config/object.go unmarshalObject, map[any]any)."""
    with pytest.raises(StackFileError, match=r"expected only string keys, got '%!s\(int=1\)'"):
        cfg("1: x\nconfig: {}\n")
    with pytest.raises(StackFileError, match=r"could not parse 1 as a configuration key"):
        cfg("config:\n  1: x\n")
    assert cfg("config:\n  m: {true: x, 2: y, 1.5: z, ~: n}\n")[f"{P}:m"] == \
        '{"1.5":"z","2":"y","\\u003cnil\\u003e":"n","true":"x"}'
    with pytest.raises(StackFileError, match=r"%!s\(bool=true\)"):
        cfg("- {true: x}\n")


# --- shapes ------------------------------------------------------------------

def test_empty_and_missing_config():
    assert cfg("") == {}
    assert cfg("# only a comment\n") == {}
    assert cfg("secretsprovider: passphrase\n") == {}
    assert cfg("config:\n") == {}
    assert cfg("config: {}\n") == {}


@pytest.mark.parametrize("body,match", [
    ("- a\n- b\n", "must be a mapping at the top level, but it is a list"),
    ("hello\n", "top level"),
    ("config:\n  - gpuNodes: 4\n", "'config' must be a mapping .* it is a list"),
    ("config: nope\n", "'config' must be a mapping"),
], ids=["list-at-top-level", "scalar-at-top-level", "config-as-list", "config-as-string"])
def test_refused_shapes(body, match):
    with pytest.raises(StackFileError, match=match):
        cfg(body)


def test_environment_refused_by_default():
    with pytest.raises(StackFileError, match="ESC"):
        cfg("environment:\n  - my-env\nconfig:\n  a: 1\n")
    assert parse_stack_yaml("environment: [e]\nconfig: {a: 1}\n", P, allow_environment=True) == {f"{P}:a": "1"}


def test_only_first_document_is_read():
    assert cfg("config: {a: 1}\n---\nconfig: {a: 2}\n") == {f"{P}:a": "1"}


# --- YAML syntax errors: file:line:column -------------------------------------

@pytest.mark.parametrize("body,position,what", [
    ("config:\n  zones: [a, b\n  other: 1\n", "Pulumi.dev.yaml:3:", "invalid YAML"),
    ("config:\n\tgpuNodes: 4\n", "Pulumi.dev.yaml:2:1:", "'\\t'"),
], ids=["unclosed-bracket", "tab-indentation"])
def test_syntax_error_has_position(body, position, what):
    with pytest.raises(StackFileError) as ei:
        cfg(body)
    msg = ei.value.message
    assert msg.startswith(position)
    assert what in msg


def test_read_stack_file(tmp_path):
    f = tmp_path / "Pulumi.dev.yaml"
    f.write_bytes("\ufeffconfig:\n  gpuNodes: 2\n".encode())
    assert read_stack_file(str(f), P) == {f"{P}:gpuNodes": "2"}
    assert read_stack_file(str(tmp_path / "Pulumi.missing.yaml"), P) == {}
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config: [\n")
    with pytest.raises(StackFileError, match=r"Pulumi.bad.yaml:2:1"):
        read_stack_file(str(bad), P)


# --- stack / project names ----------------------------------------------------

@pytest.mark.parametrize("name", ["dev", "b200-prod", "b200_prod", "v1.2", "A", "a" * 100, ".", ".."])
def test_valid_stack_names(name):
    validate_stack_name(name)


@pytest.mark.parametrize("name,msg", [
    ("", "a stack name may not be empty"),
    ("a" * 101, "a stack name cannot exceed 100 characters"),
    ("b200 prod!", "invalid character ' ' at position 4"),
    ("../../x", "invalid character '/' at position 2"),
    ("org/proj/dev", "invalid character '/' at position 3"),
    ("dév", "invalid character 'Ã' at position 1"),
    ("a\tb", "invalid character '\\\\t' at position 1"),
])
def test_invalid_stack_names(name, msg):
    with pytest.raises(ValueError) as ei:
        validate_stack_name(name)
    assert msg.replace("\\\\", "\\") in str(ei.value)
    if name and len(name) <= 100:
        assert "may only contain alphanumeric, hyphens, underscores, or periods" in str(ei.value)


def test_dot_only_names_can_be_refused():
    for n in (".", ".."):
        with pytest.raises(ValueError, match="only of periods"):
            validate_stack_name(n, allow_dot_only=False)


def test_project_names():
    validate_project_name("verl-gke")
    for bad, msg in [("", "may not be empty"), ("a" * 101, "limited to 100"), ("my proj", "may only contain")]:
        with pytest.raises(ValueError, match=msg):
            validate_project_name(bad)
