"""The job the SageMaker self-tests run: one script, its behaviour picked by argv[1].

It takes /opt/ml from $ML (the fake re-roots env values in process mode) and uses only the
standard library, so it runs in the bare base image and in process mode alike.
"""

import json
import os
import signal
import sys
import time

ML = os.environ.get("ML", "/opt/ml")
CKPT = os.environ.get("CKPT", ML + "/checkpoints")
ACTION = sys.argv[1]


def config(name):
    with open(f"{ML}/input/config/{name}.json") as f:
        return json.load(f)


rc = config("resourceconfig")
hp = config("hyperparameters")
host = rc["current_host"]
print(f"host={host} hosts={','.join(rc['hosts'])} hp={json.dumps(hp, sort_keys=True)}", flush=True)
print("to stderr", file=sys.stderr, flush=True)

if ACTION == "ok":
    with open(f"{ML}/input/data/train/numbers.txt") as f:
        total = sum(int(x) for x in f.read().split())
    os.makedirs(f"{ML}/model/sub", exist_ok=True)
    with open(f"{ML}/model/sub/sum.txt", "w") as f:
        f.write(f"{total} {host}")
    with open(f"{ML}/output/data/metrics.json", "w") as f:
        json.dump({"host": host, "channels": sorted(config("inputdataconfig"))}, f)
elif ACTION == "fail":
    with open(f"{ML}/output/failure", "w") as f:
        f.write("ValueError: boom at step 3")
    sys.exit(3)
elif ACTION == "sleep":

    def on_term(*_):
        with open(f"{ML}/model/stopped.txt", "w") as f:
            f.write("saved on SIGTERM")
        print("got SIGTERM", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    print("sleeping", flush=True)
    while True:
        time.sleep(0.05)
elif ACTION == "spot":
    os.makedirs(CKPT, exist_ok=True)
    step = f"{CKPT}/step.txt"
    if os.path.exists(step):
        with open(step) as f, open(f"{ML}/model/resumed.txt", "w") as out:
            out.write("resumed from " + f.read())
    else:
        with open(step, "w") as f:
            f.write("7")
        print("checkpoint written", flush=True)
        while True:
            time.sleep(0.05)
