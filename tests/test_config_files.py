"""Config files as users write them: `2.0` where an integer is wanted is that integer (JSON Schema calls 2.0 an
integer, and the workflow then computed with a float), a fractional value is refused naming its key, and a key
written twice (YAML keeps the last one silently) is refused naming the key and both lines, for every file the
workflow reads: `--configfile` and the default config."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

from layergeom import config as lgconfig
from layergeom.runtime import LayergeomError

TEST_CONFIG = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())


def _integer_keys(schema: dict, path: list, root: dict):
    """(path in a config, a valid integer value) of every key whose schema admits an integer, models and
    checkpoints under a model and checkpoint of config/test.yaml; list items at index 0."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    for branch in schema.get("oneOf", []) + schema.get("anyOf", []):
        yield from _integer_keys(branch, path, root)
    types = schema.get("type", [])
    types = types if isinstance(types, list) else [types]
    if "integer" in types:
        default = schema.get("default")
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1 if "exclusiveMinimum" in schema else 1)
        yield path, default if isinstance(default, int) and not isinstance(default, bool) else max(low, 1)
    for key, sub in schema.get("properties", {}).items():
        yield from _integer_keys(sub, [*path, key], root)
    if isinstance(schema.get("additionalProperties"), dict) and path in (
        ["models"],
        ["models", "tiny-llama", "checkpoints"],
    ):
        name = "tiny-llama" if path == ["models"] else "init"
        yield from _integer_keys(schema["additionalProperties"], [*path, name], root)
    if isinstance(schema.get("items"), dict):
        yield from _integer_keys(schema["items"], [*path, 0], root)


def _every_integer_key():
    main = lgconfig.load_schema("config")
    out = list(_integer_keys(main, [], main))
    for section in lgconfig.section_names():
        schema = lgconfig.load_schema(section)
        out += list(_integer_keys(schema, [section], schema))
    return out


INTEGER_KEYS = _every_integer_key()


def _put(cfg: dict, path: list, value) -> None:
    node = cfg
    for key in path[:-1]:
        if isinstance(key, int):
            node = node[key]
            continue
        node = node.setdefault(key, [] if isinstance(path[path.index(key) + 1], int) else {})
    if isinstance(path[-1], int):
        node[:] = [value]
    else:
        node[path[-1]] = value


def _get(cfg: dict, path: list):
    for key in path:
        cfg = cfg[key]
    return cfg


def test_the_walk_finds_the_integer_keys_of_the_issue():
    paths = {".".join(map(str, p)) for p, _ in INTEGER_KEYS}
    for key in ("spectra.boundaries_per_job", "spectra.chain_segments", "spectra.n_samples", "corpus.n_windows",
                "tokenwise.energy_ranks.0", "topology.leiden.n_iterations", "models.tiny-llama.n_layers",
                "models.tiny-llama.checkpoints.init.seed", "train.steps"):  # fmt: skip
        assert key in paths
    assert len(paths) >= 40


@pytest.mark.parametrize("path,value", INTEGER_KEYS, ids=[".".join(map(str, p)) for p, _ in INTEGER_KEYS])
def test_a_whole_float_of_an_integer_key_is_that_integer(path, value):
    cfg = copy.deepcopy(TEST_CONFIG)
    _put(cfg, path, float(value))
    lgconfig.validate(cfg)
    got = _get(cfg, path)
    assert type(got) is int and got == value


def test_an_override_s_whole_float_is_converted_in_the_override_itself():
    cfg = copy.deepcopy(TEST_CONFIG)
    cfg["models"]["tiny-llama"]["overrides"] = {"spectra": {"boundaries_per_job": 2.0, "chain_segments": 2.0}}
    lgconfig.validate(cfg)
    merged = lgconfig.model_section(cfg, "tiny-llama", "spectra")
    assert type(merged["boundaries_per_job"]) is int and type(merged["chain_segments"]) is int
    assert range(merged["boundaries_per_job"])  # what rules/common.smk does with it


@pytest.mark.parametrize("path", [["spectra", "boundaries_per_job"], ["corpus", "n_windows"],
                                  ["models", "tiny-llama", "overrides", "spectra", "chain_segments"]])  # fmt: skip
def test_a_fractional_value_of_an_integer_key_is_refused_naming_it(path):
    cfg = copy.deepcopy(TEST_CONFIG)
    _put(cfg, path, 2.5)
    with pytest.raises(LayergeomError, match=r"2\.5 is not of type 'integer'") as err:
        lgconfig.validate(cfg)
    assert path[-1] in str(err.value) and "\n" not in str(err.value).split("\n", 1)[1]


def test_numbers_where_numbers_are_wanted_stay_as_written():
    cfg = copy.deepcopy(TEST_CONFIG)
    cfg["spectra"] = {"alphas": [0, 0.5, 1.0], "ci_level": 0.9}
    lgconfig.validate(cfg)
    assert cfg["spectra"]["alphas"] == [0, 0.5, 1.0] and type(cfg["spectra"]["alphas"][2]) is float


def test_a_config_that_is_not_a_mapping_is_one_line():
    for bad in ([1, 2], "spectra", 3):
        with pytest.raises(LayergeomError, match="a mapping of keys is wanted at the top"):
            lgconfig.validate(bad)


# ---- keys written twice ----------------------------------------------------------------------------------------
TWICE = """\
seed: 0
spectra:
  alphas: [0, 0.5]
corpus: {n_windows: 8}
spectra:
  sr_k: 4
models:
  a:
    source: config
    checkpoints: {init: {init: true}, init: {seed: 2}}
"""


def test_a_key_written_twice_is_refused_with_its_path_and_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(TWICE)
    problems = lgconfig.duplicate_keys(TWICE, str(path))
    assert problems == [
        f"{path}: `spectra` is written twice (lines 2 and 5); YAML would keep only the second: write it once",
        f"{path}: `models.a.checkpoints.init` is written twice (lines 10 and 10); YAML would keep only the second: "
        "write it once",
    ]
    with pytest.raises(LayergeomError, match=r"`spectra` is written twice \(lines 2 and 5\)"):
        lgconfig.load(path)
    json_twice = tmp_path / "c.json"
    json_twice.write_text('{"seed": 0, "spectra": {"sr_k": 3, "sr_k": 4}}')
    with pytest.raises(LayergeomError, match=r"`spectra.sr_k` is written twice"):
        lgconfig.check_file(json_twice)
    tabs = tmp_path / "tabs.json"  # JSON indented with tabs is no YAML, and Snakemake reads it as JSON
    tabs.write_text('{\n\t"seed": 0,\n\t"spectra": {"sr_k": 3, "sr_k": 4}\n}\n')
    with pytest.raises(LayergeomError, match=r"tabs\.json: `sr_k` is written twice in one object"):
        lgconfig.check_file(tabs)
    tabs.write_text('{\n\t"seed": 0,\n\t"spectra": {"sr_k": 3}\n}\n')
    lgconfig.check_file(tabs)


def test_files_without_keys_written_twice_pass_and_merge_keys_are_no_duplicates(tmp_path):
    for f in sorted((ROOT / "config").glob("*.yaml")):
        lgconfig.check_file(f)
    anchors = tmp_path / "a.yaml"
    anchors.write_text("base: &b {sr_k: 3}\nspectra:\n  <<: *b\n  dtype: float64\n")
    lgconfig.check_file(anchors)
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"seed: 0\nlabel: \xff\n")
    with pytest.raises(LayergeomError, match=r"bad\.yaml is not UTF-8 text"):
        lgconfig.check_file(bad)


# ---- the workflow: both, before any job ------------------------------------------------------------------------
def _dry_run(tmp_path, text: str) -> subprocess.CompletedProcess:
    (tmp_path / "config.yaml").write_text(text)
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path / "wd"),
           "--configfile", str(tmp_path / "config.yaml"), "--cores", "1"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.dag
def test_the_workflow_takes_a_whole_float_and_refuses_a_section_written_twice(tmp_path):
    cfg = copy.deepcopy(TEST_CONFIG)
    cfg["models"] = {"tiny-llama": cfg["models"]["tiny-llama"]}
    cfg["spectra"] = {"boundaries_per_job": 2.0, "chain_segments": 2.0}
    ok = _dry_run(tmp_path, yaml.safe_dump(cfg, sort_keys=False))
    assert ok.returncode == 0, ok.stderr[-3000:]
    out = ok.stdout + ok.stderr
    assert "spectra_table_part" in out and "parts/spectra/1." in out and "TypeError" not in out
    text = yaml.safe_dump(cfg, sort_keys=False) + "spectra:\n  alphas: [0, 1]\n"
    bad = _dry_run(tmp_path, text)
    lines = [line for line in (bad.stdout + bad.stderr).splitlines() if "written twice" in line]
    assert bad.returncode != 0 and len(lines) == 1 and "`spectra` is written twice" in lines[0]
    assert "Traceback" not in bad.stdout + bad.stderr
    assert not (tmp_path / "wd" / "results").exists()
