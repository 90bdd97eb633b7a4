"""Child process of the kill -9 trials (tests/test_kill.py): read with a saved state, print what is delivered.

Argument: a JSON object with ``paths``, ``file_type``, ``threads``, ``aux``, ``state`` (URL of the saved
state, restored when present), ``every`` (batches between saves), ``batch_size``, ``sleep`` (seconds per
batch, a trainer's step).  Prints one line per batch, its sample ids, flushed before asking for the next
batch: every batch a saved state covers has been printed whole.
"""

import json
import sys
import time

import ingest
from ingest import synthetic


def main():
    cfg = json.loads(sys.argv[1])
    reader = ingest.DataReader("kill", paths=cfg["paths"], file_type=cfg["file_type"])
    synthetic.declare(reader, aux=cfg["aux"]).batch_size(cfg["batch_size"]).threads(cfg["threads"])
    reader.split_group(True).pad(False).prefetch(2)
    reader.save_state_every(cfg["every"], cfg["state"]).restore_from(cfg["state"], missing_ok=True)
    reader.startup()
    out = sys.stdout
    for batch in reader:
        out.write(" ".join(sid.decode() for sid in batch.sample_ids.tolist()) + "\n")
        out.flush()
        time.sleep(cfg["sleep"])
    out.write("END\n")
    out.flush()


if __name__ == "__main__":
    main()
