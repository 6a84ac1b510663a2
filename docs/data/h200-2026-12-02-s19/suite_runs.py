"""Write the suite's numbers of runs.jsonl (each line's "suite" member: what the asv suite
stores per case, with its host record) as a runs file of scripts/host_noise.py --suite, the
format scripts/regressions_simulation.py --replay reads.
    python suite_runs.py OUT.jsonl"""
import json
import sys
from pathlib import Path

runs = Path(__file__).with_name("runs.jsonl").read_text().splitlines()
Path(sys.argv[1]).write_text("".join(json.dumps(json.loads(line)["suite"]) + "\n"
                                     for line in runs if line.strip()))
