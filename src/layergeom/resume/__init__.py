"""Resumable long jobs: a job killed in the middle (pre-emption, a wall-time limit, a lost node) continues where it
stopped when it runs again, and writes exactly what an uninterrupted run writes.

Work goes into the folder ``.partial/`` next to the job's outputs. Snakemake never sees it (it deletes the declared
outputs of a failed job, not this folder), and the job removes it once its outputs are in place. Everything kept
there carries a **key**: the sha256 of the identities of the job's inputs (path, size and modification time of every
file), of its settings and of the package's source (:func:`.keys.code_id`). A restart reuses only work of the same
key, so a changed input, setting or code starts again from zero.

Two patterns:

- **Finished items** (the Jacobian and graph jobs, whose boundaries have their own files): each boundary's files are
  written into ``.partial/`` as it finishes, a marker with the key and each file's size and sha256 last; a restart
  skips the boundaries whose marker matches and whose files still have the recorded size and sha256
  (:func:`.items.item_done`, :func:`.items.mark_done`): a truncated file, or one swapped with another boundary's, is
  redone. The activation dump is a variant: its store grows in ``.partial/``, and its marker records the windows
  written (after a flush), the ``.npy`` header and a sha256 of the rows of each snapshot.
- **Snapshots** (:class:`.snapshots.Snapshots`, for jobs that carry a state from one step to the next: the products
  of the cumulative and Schur tables, the KL of the windows done so far): the state after a step is saved every
  ``every_s`` seconds (config ``snapshot_minutes``), atomically, replacing the previous snapshot; a restart
  continues after the last one. States are trees of dicts, lists, numbers, strings, numpy arrays and pandas frames,
  stored in one ``.npz`` (no pickle) and restored bit for bit. A snapshot that cannot be read back (a torn zip, a
  damaged tree) is removed with a log line and the job starts afresh.

A job holds a **lock** in its work folder while it works there (:class:`.work_folder.WorkLock`, ``{job}.lock``: the
holder's PID, host and start): a second instance of the same job (an orphan left by a lost snakemake, a
resubmission) refuses with one line naming the holder. A lock whose holder is dead (a PID that no longer runs on
this host) or, from another host, that has not been refreshed for :data:`.work_folder.LOCK_STALE_S` seconds (the
holder refreshes it every :data:`.work_folder.HEARTBEAT_S`) is stale, and is taken over with a log line.

This package imports no torch. Its modules:

- :mod:`.keys`: a job's key (its inputs' identities, settings, the code, the threads);
- :mod:`.work_folder`: the work folder ``.partial/`` — where it is, its lock (one instance per job), clearing it and
  the work that no job of the current settings owns;
- :mod:`.items`: the markers of finished items;
- :mod:`.snapshots`: the snapshots of a loop's state;
- :mod:`.trees`: state trees as JSON and numpy arrays (no pickle), for the snapshots and the fanned-out jobs' parts.
"""
