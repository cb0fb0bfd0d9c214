#!/usr/bin/env python3
"""A process that speaks qeffect's handshakes with a wrong job secret (issue 23).

Used by job_auth.sh.  It never knows the job's secret; it must be refused.

  auth_rogue.py rdv  --port P --rank R --world W --run-id ID [--pid PID]
      Attack a rendezvous/mesh listener: port P (or, with --pid, the TCP
      listener that process PID holds, found in /proc).  It holds one
      connection open saying nothing, and on a second one sends a well-formed
      hello as rank R, reads the challenge and answers with a proof made with
      a wrong secret.  Prints "refused: TEXT" when it was turned away,
      "ADMITTED" when it was not.
  auth_rogue.py link --parent PID --count N [--run-id ID]
      Attack the cpu device links (abstract Unix sockets) of the children of
      PID: for each of the first N listeners, a silent connection, a wrong-
      secret handshake and (as root) a connection from another uid.
  auth_rogue.py secret --parent PID
      Not an attack: the test's way to learn the secret the launcher made, to
      scan logs for it afterwards.  A forked rank's setenv does not show in
      /proc/PID/environ, so it reads the rank's writable memory (root, or the
      same uid without ptrace restrictions) for QE_JOB_SECRET=<64 hex>.
"""
import hashlib, hmac, os, re, socket, struct, sys, threading, time

WRONG = b"not-the-job-secret"
NONCE = 32


def mac(label, ctx):
    return hmac.new(WRONG, label + b"\0" + ctx, hashlib.sha256).digest()


def recv_exact(s, n):
    # a reset is the listener dropping us, as a close is
    b = b""
    while len(b) < n:
        try:
            k = s.recv(n - len(b))
        except ConnectionResetError:
            return None
        if not k:
            return None
        b += k
    return b


def hold(s):
    # keep a silent connection open until the other side drops it
    try:
        s.recv(1)
    except OSError:
        pass


def tcp_listen_port(pid):
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            m = re.match(r"socket:\[(\d+)\]", os.readlink("/proc/%d/fd/%s" % (pid, fd)))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:
            return int(f[1].split(":")[1], 16)
    return None


def rdv(a):
    port = a.get("port")
    deadline = time.time() + 30
    while a.get("pid") and not port:
        port = tcp_listen_port(int(a["pid"]))
        if not port:
            if time.time() > deadline:
                print("no listener found"); return 1
            time.sleep(0.02)
    port = int(port)

    def conn():
        while True:
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=30)
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.02)

    silent = conn()
    threading.Thread(target=hold, args=(silent,), daemon=True).start()
    s = conn()
    print("connected to port %d" % port, flush=True)
    rank, world, run_id = int(a["rank"]), int(a["world"]), a["run-id"].encode()
    acc = int(a.get("acceptor", 0))
    nc = os.urandom(NONCE)
    rid = run_id.ljust(64, b"\0")
    hello = struct.pack("<6I", 0x56524551, 2, world, rank, 12345, 1) + rid + b"127.0.0.1".ljust(64, b"\0") + nc
    s.sendall(hello)
    head = recv_exact(s, 8)
    if head is None:
        print("refused: closed at the hello"); return 0
    magic, = struct.unpack("<I", head[:4])
    if magic == 0x56524551:
        print("refused: " + recv_exact(s, 200).split(b"\0")[0].decode()); return 0
    ch = recv_exact(s, 64)
    na = ch[:NONCE]
    ctx = rid + struct.pack("<3I", world, rank, acc) + nc + na
    s.sendall(struct.pack("<I", 0x50524551) + mac(b"qeffect rendezvous v2 connector", ctx))
    v = recv_exact(s, 208)
    if v is None:
        print("refused: closed after the proof"); return 0
    ok, = struct.unpack("<I", v[4:8])
    if ok == 1:
        print("ADMITTED"); return 1
    print("refused: " + v[8:].split(b"\0")[0].decode())
    return 0


def children(ppid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = open("/proc/%s/stat" % d).read()
            except OSError:
                continue
            if int(st.rsplit(")", 1)[1].split()[1]) == ppid:
                out.append(int(d))
    return out


def link_attack(name, run_id, results):
    addr = "\0" + name
    hdr = lambda magic, ln: struct.pack("=IIQ", magic, 0, ln)
    try:
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(addr)
        threading.Thread(target=hold, args=(silent,), daemon=True).start()
        if os.geteuid() == 0:
            pid = os.fork()
            if pid == 0:
                code = 3
                try:
                    os.setuid(65534)
                    o = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    o.settimeout(20)
                    o.connect(addr)
                    o.sendall(hdr(0x484c4551, len(name) + NONCE) + name.encode() + os.urandom(NONCE))
                    code = 0 if not o.recv(16) else 4
                except OSError:
                    code = 0
                os._exit(code)
            _, st = os.waitpid(pid, 0)
            results.append("%s other-uid %s" % (name, "refused" if os.WEXITSTATUS(st) == 0 else "ADMITTED"))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(addr)
        nr = os.urandom(NONCE)
        s.sendall(hdr(0x484c4551, len(name) + NONCE) + name.encode() + nr)
        h = recv_exact(s, 16)
        if h is None:
            results.append("%s refused at the hello" % name); return
        ch = recv_exact(s, 64)
        ctx = run_id.encode()[:63].ljust(64, b"\0") + name.encode().ljust(97, b"\0") + nr + ch[:NONCE]
        s.sendall(hdr(0x50434c51, 32) + mac(b"qeffect cpu link v1 receiver", ctx))
        a = recv_exact(s, 16)
        results.append("%s %s" % (name, "refused" if a is None else "ADMITTED"))
    except OSError as e:
        results.append("%s refused (%s)" % (name, e))


def link(a):
    parent, count, run_id = int(a["parent"]), int(a["count"]), a.get("run-id", "qeffect")
    seen, results, threads = set(), [], []
    deadline = time.time() + 120
    while len(seen) < count and time.time() < deadline:
        kids = children(parent)
        for line in open("/proc/net/unix").read().splitlines()[1:]:
            f = line.split()
            if len(f) < 8 or f[3] != "00010000":
                continue
            m = re.match(r"@(qeffect-link\.(\d+)\.\S+)$", f[7])
            if m and int(m.group(2)) in kids and m.group(1) not in seen and len(seen) < count:
                seen.add(m.group(1))
                t = threading.Thread(target=link_attack, args=(m.group(1), run_id, results))
                t.start()
                threads.append(t)
        time.sleep(0.005)
    for t in threads:
        t.join(60)
    for r in results:
        print(r)
    print("attacked %d links" % len(seen))
    return 1 if any("ADMITTED" in r for r in results) or len(seen) < count else 0


def secret(a):
    parent = int(a["parent"])
    deadline = time.time() + 30
    pat = re.compile(rb"QE_JOB_SECRET=([0-9a-f]{64})(?![0-9a-f])")
    while time.time() < deadline:
        for k in children(parent):
            try:
                maps = open("/proc/%d/maps" % k).read().splitlines()
                mem = open("/proc/%d/mem" % k, "rb", 0)
            except OSError:
                continue
            for line in maps:
                f = line.split()
                if not f[1].startswith("rw"):
                    continue
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                if hi - lo > (256 << 20):
                    continue
                try:
                    mem.seek(lo)
                    m = pat.search(mem.read(hi - lo))
                except (OSError, ValueError, OverflowError):
                    continue
                if m:
                    print(m.group(1).decode())
                    return 0
        time.sleep(0.02)
    return 1


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    a = {args[i][2:]: args[i + 1] for i in range(0, len(args), 2)}
    sys.exit({"rdv": rdv, "link": link, "secret": secret}[mode](a))


main()
