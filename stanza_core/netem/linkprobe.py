"""TCP throughput probe, run inside a node's namespace as a plain script (stdlib only, so it
starts in milliseconds instead of importing the package and torch).

    python linkprobe.py recv ADDR PORT CONNS IFACE SECONDS   # prints "ready", then one JSON line
    python linkprobe.py send ADDR PORT IFACE SECONDS         # prints one JSON line

Both ends sample, every 20 ms, the application bytes moved so far and the kernel counters of
their interface (``/sys`` inside ``ip netns exec`` is the namespace's own), so the caller can
compute payload and wire rates over a window that leaves out TCP slow start and the final drain.
"""
import json
import socket
import sys
import threading
import time

TICK_S = 0.02


def _iface_bytes(iface):
    base = f"/sys/class/net/{iface}/statistics/"
    with open(base + "tx_bytes") as tx, open(base + "rx_bytes") as rx:
        return int(tx.read()), int(rx.read())


def _sample(iface, moved, seconds, stop):
    """(t, app bytes, iface tx, iface rx) rows until ``seconds`` pass or ``stop`` is set."""
    rows, end = [], time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < end:
        rows.append((time.monotonic(), sum(moved), *_iface_bytes(iface)))
        time.sleep(TICK_S)
    rows.append((time.monotonic(), sum(moved), *_iface_bytes(iface)))
    return rows


def recv(addr, port, conns, iface, seconds):
    srv = socket.create_server((addr, int(port)), backlog=int(conns))
    print("ready", flush=True)
    moved = [0] * int(conns)

    def drain(k, conn):
        buf = memoryview(bytearray(1 << 20))
        while n := conn.recv_into(buf):
            moved[k] += n

    threads = []
    for k in range(int(conns)):
        conn, _ = srv.accept()
        threads.append(threading.Thread(target=drain, args=(k, conn), daemon=True))
        threads[-1].start()
    done = threading.Event()
    threading.Thread(target=lambda: [t.join() for t in threads] and None or done.set(),
                     daemon=True).start()
    # Sample until every sender has closed (its data fully drained), with a safety limit.
    rows = _sample(iface, moved, float(seconds) + 10, done)
    print(json.dumps({"role": "recv", "rows": rows}), flush=True)


def send(addr, port, iface, seconds):
    sock = socket.create_connection((addr, int(port)))
    moved, stop, chunk = [0], threading.Event(), bytes(1 << 18)
    box = {}
    sampler = threading.Thread(target=lambda: box.update(rows=_sample(iface, moved, float(seconds),
                                                                       stop)))
    sampler.start()
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        sock.sendall(chunk)
        moved[0] += len(chunk)   # accepted by the kernel, not necessarily on the wire yet
    stop.set()
    sampler.join()
    sock.close()
    print(json.dumps({"role": "send", "rows": box["rows"]}), flush=True)


if __name__ == "__main__":
    {"recv": recv, "send": send}[sys.argv[1]](*sys.argv[2:])
