#!/usr/bin/env python3
"""link_probe.py - round-trip time and throughput of the link between two
namespace hosts (tests/mp/hosts_test.sh), measured with TCP from inside
them: ping and iperf3 need not be installed.

  hosts_test.sh [--qdisc SPEC] [--delay US] --expect "" ab \\
      python3 tests/mp/link_probe.py [--rounds N] [--bytes SIZE]

Two ranks (SHARC_RANK 0 and 1, from hosts_test.sh): rank 0 listens at
SHARC_ADDR, rank 1 connects. Rank 1 sends 1 byte and waits for it to come
back, N times (default 200, after 10 rounds not counted: connection set-up,
ARP), and prints the round trips in microseconds:
  rtt_us min M median D p90 P max X (N rounds)
With --bytes SIZE (suffix K, M or G: KiB, MiB, GiB) it then sends SIZE
bytes, which rank 0 answers with one byte once they are all in, and prints
  throughput_gbit G (SIZE bytes in T s)
The round trip of 1 byte over TCP with TCP_NODELAY is one packet each way
(the ACKs ride on the replies), so it is 2 x the one-way link delay plus the
time the two stacks and Python take (tens of microseconds here).
"""
import os
import socket
import statistics
import sys
import time


def size_arg(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in mult:
        return int(float(text[:-1]) * mult[text[-1].upper()])
    return int(text)


def recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer closed after %d of %d bytes" % (got, n))
        got += k
    return buf


def main():
    rounds, nbytes = 200, 0
    args = sys.argv[1:]
    while args:
        if args[0] == "--rounds" and len(args) > 1:
            rounds = int(args[1])
        elif args[0] == "--bytes" and len(args) > 1:
            nbytes = size_arg(args[1])
        else:
            print(__doc__, file=sys.stderr)
            return 2
        args = args[2:]
    rank = int(os.environ["SHARC_RANK"])
    host, port = os.environ["SHARC_ADDR"].rsplit(":", 1)
    port = int(port)
    chunk = 1 << 20
    if rank == 0:
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((host, port))
        lsock.listen(1)
        lsock.settimeout(30)
        sock, _ = lsock.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(rounds + 10):
            sock.sendall(recv_exact(sock, 1))
        if nbytes:
            buf = bytearray(chunk)
            got = 0
            while got < nbytes:
                k = sock.recv_into(buf)
                if k == 0:
                    raise ConnectionError("peer closed during the transfer")
                got += k
            sock.sendall(b"k")
        sock.close()
        print("link_probe: rank 0 answered %d rounds%s" %
              (rounds + 10, ", received %d bytes" % nbytes if nbytes else ""))
        return 0
    sock = None
    deadline = time.monotonic() + 30
    while sock is None:
        try:
            sock = socket.create_connection((host, port), timeout=30)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtt = []
    for i in range(rounds + 10):
        t0 = time.perf_counter_ns()
        sock.sendall(b"p")
        recv_exact(sock, 1)
        if i >= 10:
            rtt.append((time.perf_counter_ns() - t0) / 1e3)
    rtt.sort()
    print("rtt_us min %.1f median %.1f p90 %.1f max %.1f (%d rounds)" %
          (rtt[0], statistics.median(rtt), rtt[int(0.9 * (len(rtt) - 1))],
           rtt[-1], len(rtt)))
    if nbytes:
        data = memoryview(bytearray(chunk))
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            k = min(left, chunk)
            sock.sendall(data[:k])
            left -= k
        recv_exact(sock, 1)
        secs = time.perf_counter() - t0
        print("throughput_gbit %.2f (%d bytes in %.3f s)" %
              (nbytes * 8 / secs / 1e9, nbytes, secs))
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
