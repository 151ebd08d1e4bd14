"""The program the Kubernetes fake's self-tests run in their pods: its behaviour is argv[1].

Standard library only, so it runs in the bare base image and in process mode alike; what the
pod was given (env, files) is printed, for the tests to read back from the pod's log.
"""

import os
import signal
import sys
import time

ACTION = sys.argv[1]
print(f"host={os.environ.get('HOSTNAME')} action={ACTION}", flush=True)

if ACTION == "ok":
    print("to stderr", file=sys.stderr, flush=True)
elif ACTION == "fail":
    print("boom at step 3", flush=True)
    sys.exit(3)
elif ACTION == "env":
    for name in sys.argv[2:]:
        print(f"{name}={os.environ.get(name)}", flush=True)
elif ACTION == "file":  # a mounted file's content and mode, and $TOKEN
    path = sys.argv[2]
    with open(path) as f:
        mode = oct(os.stat(path).st_mode & 0o777)
        print(f"content={f.read()} mode={mode} env={os.environ.get('TOKEN')}", flush=True)
elif ACTION == "write":  # a file in the volume at argv[2], from the working directory
    with open(sys.argv[2], "w") as f:
        f.write("written")
    print(f"cwd={os.getcwd()}", flush=True)
elif ACTION == "two-seconds":  # two lines more than a second apart
    print("first", flush=True)
    time.sleep(1.2)
    print("second", flush=True)
elif ACTION == "ticks":
    for i in range(3):
        print(f"tick {i}", flush=True)
        time.sleep(0.3)
elif ACTION == "sleep":

    def on_term(*_):
        print("got SIGTERM", flush=True)
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    print("sleeping", flush=True)
    while True:
        time.sleep(0.05)
