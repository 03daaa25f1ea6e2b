"""Workers die with their driver, kill -9 included (evolve/lifeline.py)."""
import os
import signal
import subprocess
import sys
import time

DRIVER = '''
import multiprocessing as mp, sys, time
import evolve  # arms the lifeline in every spawned child that imports the package

def child():
    time.sleep(120)

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=child)
    p.start()
    print(p.pid, flush=True)
    time.sleep(120)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except OSError:
        return False


def test_spawned_worker_dies_with_a_killed_driver(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    drv = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = int(drv.stdout.readline())
    time.sleep(1.0)
    assert _alive(child)
    drv.send_signal(signal.SIGKILL)
    drv.wait()
    deadline = time.time() + 3
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    gone = not _alive(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone, "the spawned child outlived its killed driver by 3 s"
