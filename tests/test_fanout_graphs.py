"""The graph jobs fanned out over blocks of boundaries (spectra.boundaries_per_job): one job per block writes
its boundaries' graph files, the same bytes as the checkpoint's one graph job (layergeom.topology.pipeline),
the blocks share the work folder without touching each other's work, a failed block resumes, and the DAG
has one graph rule per block only where the key asks for it (with one block the rule is today's)."""

from __future__ import annotations

import pytest
import yaml
from lg_runs import TEST_CONFIG_FILE
from test_fanout import _jobs
from test_resume import _graph_setup

from layergeom.resume import work_folder


def _blocks(names, n):
    return [names[i : i + n] for i in range(0, len(names), n)]


def _bytes(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tsv"))}


def _write_block(tmp_path, outs, names, cfg, block, k):
    """Block k's graph job (as the rule topology_graph_<model>_block<k> runs it): its boundaries' files alone."""
    from layergeom.topology import pipeline

    idx = [names.index(b) for b in block]
    pipeline.write_graphs(
        tmp_path / "acts", block, cfg, 0, **{key: [v[i] for i in idx] for key, v in outs.items()}, block=k
    )


# ---- (a) blocks == one job, byte for byte ------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2])
def test_graph_blocks_write_the_single_jobs_bytes(tmp_path, n):
    from layergeom.topology import pipeline

    names, cfg, outs = _graph_setup(tmp_path)  # 3 boundaries of a tiny Llama's store
    pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **outs(tmp_path / "one"))
    fan = outs(tmp_path / "fan")
    for k, block in enumerate(_blocks(names, n)):
        _write_block(tmp_path, fan, names, cfg, block, k)
    one = _bytes(tmp_path / "one")
    assert len(one) == 3 * len(names) and _bytes(tmp_path / "fan") == one
    assert b"\n0\t" in one[f"{names[0]}.tsv"]  # a node table with rows: the comparison has content
    assert not (tmp_path / "fan" / work_folder.PARTIAL).exists()  # the last block took the work folder with it


# ---- (b) a failed block resumes; the others leave its work alone --------------------------------------------
def test_a_failed_block_resumes_and_the_other_blocks_leave_its_work(tmp_path, monkeypatch):
    from layergeom.topology import pipeline

    names, cfg, outs = _graph_setup(tmp_path)
    pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **outs(tmp_path / "one"))
    fan = outs(tmp_path / "fan")
    blocks = _blocks(names, 2)  # [b0, b1], [b2]
    real = pipeline.store_topology

    def crash(store, b, *a):
        if b == blocks[0][1]:
            raise RuntimeError("injected crash")
        return real(store, b, *a)

    monkeypatch.setattr(pipeline, "store_topology", crash)
    with pytest.raises(RuntimeError, match="injected"):
        _write_block(tmp_path, fan, names, cfg, blocks[0], 0)
    work = tmp_path / "fan" / work_folder.PARTIAL
    assert sorted(p.name for p in work.glob("*.done.json")) == [f"{blocks[0][0]}.done.json"]
    monkeypatch.setattr(pipeline, "store_topology", real)
    _write_block(tmp_path, fan, names, cfg, blocks[1], 1)  # the other block finishes meanwhile
    assert (work / f"{blocks[0][0]}.done.json").exists()  # block 0's finished boundary is still there
    assert sorted(_bytes(tmp_path / "fan")) == sorted(
        f"{blocks[1][0]}{s}" for s in (".tsv", ".edges.tsv", ".sweep.tsv")
    )
    computed = []
    monkeypatch.setattr(pipeline, "store_topology", lambda store, b, *a: computed.append(b) or real(store, b, *a))
    _write_block(tmp_path, fan, names, cfg, blocks[0], 0)
    assert computed == [blocks[0][1]]  # the finished boundary was reused
    assert _bytes(tmp_path / "fan") == _bytes(tmp_path / "one")
    assert not work.exists()


def test_a_block_works_beside_a_live_block(tmp_path):
    """A block's lock is its own (graphs_{k}): block 1 runs and finishes while block 0 holds its lock in the
    shared work folder, and leaves that lock (and the folder) in place."""
    names, cfg, outs = _graph_setup(tmp_path)
    work = tmp_path / "fan" / work_folder.PARTIAL
    held = work_folder.WorkLock.hold(work, "graphs_0")
    try:
        _write_block(tmp_path, outs(tmp_path / "fan"), names, cfg, names[2:], 1)
        assert sorted(_bytes(tmp_path / "fan")) == sorted(
            f"{names[2]}{s}" for s in (".tsv", ".edges.tsv", ".sweep.tsv")
        )
        assert sorted(p.name for p in work.iterdir()) == ["graphs_0.lock"]
    finally:
        held.release()


# ---- (c) the DAG: one graph job per block, only where the key asks ------------------------------------------
def _graph_jobs(jobs, model="tiny-gpt2"):
    part = model.replace("-", "_")
    return sorted((j for j in jobs if j["rule"].startswith(f"topology_graph_{part}")), key=lambda j: j["rule"])


@pytest.mark.dag
def test_boundaries_per_job_fans_out_one_models_graphs_with_their_resources(tmp_path, monkeypatch):
    """tiny-gpt2 (4 boundaries) made 4096 wide over a corpus of 6.4M tokens (runtimes above the floor), 3
    boundaries per job: graph jobs for blocks of 3 and 1, each writing exactly its block's files and asking for
    its block's runtime (layergeom.resources); the other models keep their one graph job. 4 per job: the one
    job of today, the same files."""
    import test_fanout
    from schema_defaults import section_defaults

    from layergeom.names import boundaries_for
    from layergeom.resources import topology_jobs

    names, d = boundaries_for("gpt2", 2), 4096
    blocks = _blocks(names, 3)
    topo = section_defaults("topology")
    cfg = yaml.safe_load(TEST_CONFIG_FILE.read_text())
    cfg["corpus"]["n_windows"] = 200_000  # read at DAG time only through the resources (no store yet)
    tokens = cfg["corpus"]["n_windows"] * cfg["corpus"]["window_tokens"]
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(cfg, sort_keys=False))
    monkeypatch.setattr(test_fanout, "TEST_CONFIG_FILE", big)
    fanned = _jobs(tmp_path / "fan", {"spectra": {"boundaries_per_job": 3}}, d)
    single = _jobs(tmp_path / "one", {"spectra": {"boundaries_per_job": len(names)}}, d)
    graphs = _graph_jobs(fanned)
    assert [j["rule"] for j in graphs] == ["topology_graph_tiny_gpt2_block0", "topology_graph_tiny_gpt2_block1"]
    for j, block in zip(graphs, blocks):
        assert sorted(j["output"]) == sorted(
            f"results/tiny-gpt2/init/graphs/{b}{s}" for b in block for s in (".tsv", ".edges.tsv", ".sweep.tsv")
        )
        assert j["input"] == ["results/tiny-gpt2/init/activations"]
        assert int(j["resources"]["runtime"]) == topology_jobs.topology_graph_runtime_min(d, tokens, len(block))
        assert int(j["resources"]["mem_mb"]) == topology_jobs.topology_graph_mem_mb(
            d, tokens, topo["chunk_tokens"], topo["top_k"]
        )
    assert int(graphs[1]["resources"]["runtime"]) < int(graphs[0]["resources"]["runtime"])
    (one,) = _graph_jobs(single)
    assert one["rule"] == "topology_graph_tiny_gpt2"
    assert int(one["resources"]["runtime"]) == topology_jobs.topology_graph_runtime_min(d, tokens, len(names))
    assert int(one["resources"]["runtime"]) > int(graphs[0]["resources"]["runtime"])
    assert sorted(one["output"]) == sorted(o for j in graphs for o in j["output"])  # the same files
    for other in ("tiny-neox", "tiny-llama"):  # one graph job per checkpoint, today's rule
        part = other.replace("-", "_")
        assert {j["rule"] for j in _graph_jobs(fanned, other)} == {f"topology_graph_{part}"}
    coupling = [j for j in fanned if j["rule"] == "topology_coupling" and j["wildcards"]["model"] == "tiny-gpt2"]
    assert len(coupling) == 1  # reads every block's files: no gather
