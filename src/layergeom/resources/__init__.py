"""What a job asks of the machine, estimated before it runs (torch-free: the workflow reads it when it
schedules jobs; rules/common.smk imports these modules with snakemake alone).

``materialize`` converts a checkpoint into safetensors in the model's dtype. Its peak host memory was measured
by ``bench/materialize_memory.py`` (``bench/results/materialize_memory.md``, docs/precision.md): about 1.2× the
weights in the target dtype above a baseline of torch and transformers, whatever the source dtype (files in
the target dtype already are memory-mapped, not copied). The job asks for 1.3× plus 2.5 GB, counted from the
safetensors headers of the files it reads (no tensor is loaded).

The spectral tables (``spectra_table``, ``_cumulative``, ``_schur``, ``_convergence``) and the topology jobs ask for
the memory their arrays hold at the peak, counted from the code in bytes per d², and for the runtime of their
boundaries at rates measured by ``bench/resources_rates.py`` (docs/cluster.md). The model jobs (activations, the
Jacobians, the tokenwise fits and KL) count their peak bytes from the model's shapes.

- :mod:`.files`: what a request reads of a job's inputs without loading them (safetensors and ``.npy``
  headers, an activation store's store.json, a config's width);
- :mod:`.margins`: the safety factor, baselines and floors every estimate shares, the flat requests of the
  figure and gather jobs;
- :mod:`.materialize`: materialize's host memory;
- :mod:`.rates`: the measured seconds per boundary of the spectral and topology jobs;
- :mod:`.spectral_jobs`: the spectral tables (table, cumulative, convergence; fanned out or not);
- :mod:`.schur_jobs`: the Schur surgery (single job, prep, chains and their segments);
- :mod:`.topology_jobs`: the graphs and the coupling tests;
- :mod:`.model_jobs`: the model jobs' shapes, peak bytes and work.
"""
