"""Load and validate the workflow configuration against the JSON schemas in ``config/schema/``.

The main schema covers models, corpus and run settings; each analysis section (``tokenwise``,
``spectra``, ``topology``, ...) has its own ``{section}.schema.yaml``. Defaults come from the
schemas, and a typo'd key or a wrong type stops the run with a message naming the key.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator, validators

from .runtime import LayergeomError

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "config" / "schema"


def _with_defaults(cls):
    validate_props = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return validators.extend(cls, {"properties": set_defaults})


_Validator = _with_defaults(Draft202012Validator)

# JSON Schema counts 2.0 as an integer; the workflow then computes with a float where it wants an int (a range, an
# index). Validation takes a number without a fractional part as the integer it equals (`2.0` as `2`): checked
# against a schema where "integer" means a Python int, the errors name the keys to convert.
_STRICT_TYPES = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda checker, x: isinstance(x, int) and not isinstance(x, bool)
)
_StrictValidator = validators.extend(Draft202012Validator, type_checker=_STRICT_TYPES)


def load_schema(name: str, schema_dir: Path = SCHEMA_DIR) -> dict:
    return yaml.safe_load((schema_dir / f"{name}.schema.yaml").read_text())


def schema_defaults(name: str, schema_dir: Path = SCHEMA_DIR) -> dict:
    """A section's settings when nothing is set: its schema's defaults (what validation fills in)."""
    out: dict = {}
    _check(out, load_schema(name, schema_dir), name)
    return out


def section_names(schema_dir: Path = SCHEMA_DIR) -> list[str]:
    return sorted(p.name.split(".")[0] for p in schema_dir.glob("*.schema.yaml") if p.name != "config.schema.yaml")


def _check(instance, schema, where: str) -> None:
    errors = sorted(_Validator(schema).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors[:10]:
            path = ".".join(str(p) for p in [where, *e.absolute_path] if p != "")
            lines.append(f"  {path or '<top>'}: {e.message}")
        raise LayergeomError("invalid configuration:\n" + "\n".join(lines))


def _integral_floats(errors) -> list:
    """The paths (in the instance) of the floats without a fractional part where the schema wants an integer,
    from the errors of a strict validator (also within oneOf/anyOf branches)."""
    out = []
    for e in errors:
        types = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        if e.validator == "type" and "integer" in types:
            x = e.instance
            if isinstance(x, float) and x.is_integer():
                out.append(list(e.absolute_path))
        out += _integral_floats(e.context or [])
    return out


def coerce_integers(instance, schema) -> None:
    """Replace, in place, each float without a fractional part (``2.0``, ``1.0e3``) where `schema` wants an
    integer by the int it equals; anything else is left for validation to report."""
    for _ in range(100):  # one pass per nesting that a conversion may uncover (oneOf branches)
        paths = _integral_floats(_StrictValidator(schema).iter_errors(instance))
        if not paths:
            return
        for path in paths:
            node = instance
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = int(node[path[-1]])


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def validate(config: dict, schema_dir: Path = SCHEMA_DIR) -> dict:
    """Validate in place (filling defaults) and return the config; raises LayergeomError naming keys. A float
    without a fractional part where an integer is wanted becomes that integer (:func:`coerce_integers`)."""
    if not isinstance(config, dict):
        raise LayergeomError(f"invalid configuration: a mapping of keys is wanted at the top, not {_kind(config)}")
    main = load_schema("config", schema_dir)
    coerce_integers(config, main)
    _check(config, main, "")
    for section in section_names(schema_dir):
        schema = load_schema(section, schema_dir)
        coerce_integers(config.setdefault(section, {}), schema)
        _check(config[section], schema, section)
        for name, m in config["models"].items():
            over = m.get("overrides", {}).get(section)
            if over is not None:
                coerce_integers(over, schema)  # the override's own values (the merge below is a copy)
                _check(deep_merge(config[section], over), schema, f"models.{name}.overrides.{section}")
    for name, m in config["models"].items():
        unknown = set(m.get("overrides", {})) - set(section_names(schema_dir))
        if unknown:
            raise LayergeomError(
                f"invalid configuration:\n  models.{name}.overrides: unknown section(s) {sorted(unknown)}"
            )
        _check_source_keys(name, m)
    _check_rule_names(config["models"])
    return config


#: sources that read a `path` (model-wide or per checkpoint): a model directory, or a GGUF file
PATH_SOURCES = ("local", "gguf")


def _check_source_keys(name: str, m: dict) -> None:
    """``path`` and ``revision`` mean one thing each: a source that does not read one refuses it."""
    source = m["source"]
    cks = {c: ck or {} for c, ck in (m.get("checkpoints") or {}).items()}
    if source not in PATH_SOURCES:
        keys = ([f"models.{name}.path"] if "path" in m else []) + [
            f"models.{name}.checkpoints.{c}.path" for c, ck in cks.items() if "path" in ck
        ]
        if keys:
            raise LayergeomError(
                f"invalid configuration:\n  {keys[0]}: source '{source}' reads no path (only "
                f"{' and '.join(PATH_SOURCES)} do: a model directory, a GGUF file); remove it"
            )
    if source != "hub":
        for c, ck in cks.items():
            if "revision" in ck:
                raise LayergeomError(
                    f"invalid configuration:\n  models.{name}.checkpoints.{c}.revision: source '{source}' has no "
                    f"revisions (only hub models do); remove it"
                )
    if source == "local" and "path" not in m:
        for c, ck in cks.items():
            if not ck.get("init") and "path" not in ck:
                raise LayergeomError(
                    f"invalid configuration:\n  models.{name}.checkpoints.{c}: source 'local' needs the model "
                    f"directory: set models.{name}.path or a path on this checkpoint"
                )


def rule_name_part(model: str) -> str:
    """A model name as it appears in generated rule names (letters, digits and underscores)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", model)


def _check_rule_names(models: dict) -> None:
    """Two model names that differ only in punctuation (`tiny-gpt2`, `tiny.gpt2`) would share rule names."""
    seen: dict[str, str] = {}
    for name in models:
        other = seen.setdefault(rule_name_part(name), name)
        if other != name:
            raise LayergeomError(
                f"invalid configuration:\n  models: the names '{other}' and '{name}' differ only in '-' '.' and "
                f"'_', and the workflow's rule names cannot tell them apart; rename one of them"
            )


def model_section(config: dict, model: str, section: str) -> dict:
    """A section's settings for one model: the global section with that model's overrides merged in."""
    return deep_merge(config.get(section, {}), config["models"][model].get("overrides", {}).get(section, {}))


def _kind(x) -> str:
    return "nothing" if x is None else f"a {type(x).__name__} ({str(x)[:40]!r})"


def duplicate_keys(text: str, where: str = "the config file") -> list[str]:
    """One line per key that a YAML (or JSON) mapping writes twice, with its dotted path and both lines: YAML
    keeps the last and drops the first without a word (``spectra:`` … ``spectra:`` loses the first section)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        json_twice = _json_duplicate_keys(text, where)  # JSON that is no YAML (tab indentation): Snakemake reads it
        if json_twice is not None:
            return json_twice
        raise LayergeomError(f"{where} is not valid YAML: {' '.join(str(err).split())}") from None
    out: list[str] = []

    def walk(node, path: list[str]) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    name = key.value
                    line = key.start_mark.line + 1
                    if name in seen:
                        dotted = ".".join([*path, name])
                        out.append(f"{where}: `{dotted}` is written twice (lines {seen[name]} and {line}); YAML "
                                   f"would keep only the second: write it once")  # fmt: skip
                    else:
                        seen[name] = line
                    walk(value, [*path, name])
                else:
                    walk(value, path)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, [*path[:-1], f"{path[-1]}[{i}]"] if path else [f"[{i}]"])

    walk(root, [])
    return out


def _json_duplicate_keys(text: str, where: str) -> list[str] | None:
    """:func:`duplicate_keys` of a JSON text (the keys without their path: JSON's parser gives none), or None when
    the text is not JSON."""
    out: list[str] = []

    def pairs(items):
        seen = set()
        for key, _ in items:
            if key in seen:
                out.append(f"{where}: `{key}` is written twice in one object; JSON readers would keep only the "
                           "second: write it once")  # fmt: skip
            seen.add(key)
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except ValueError:
        return None
    return out


def check_file(path: str | Path) -> None:
    """Refuse a config file that writes a key twice (:func:`duplicate_keys`), naming the key and its lines; the
    workflow checks each ``--configfile`` (and the default config) with it before validating."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise LayergeomError(f"config file {path} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise LayergeomError(f"config file {path} cannot be read ({err.strerror or err})") from None
    problems = duplicate_keys(text, str(path))
    if problems:
        raise LayergeomError("invalid configuration:\n  " + "\n  ".join(problems))


def load(path: str | Path, schema_dir: Path = SCHEMA_DIR) -> dict:
    """A config file, checked for keys written twice (:func:`check_file`) and validated."""
    check_file(path)
    return validate(yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}, schema_dir)
