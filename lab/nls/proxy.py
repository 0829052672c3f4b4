"""Stand-in of the HTTP proxy between a vGPU guest and its licence service (issue 37 point 10).

nvidia-gridd reaches the service through the proxy gridd.conf names (ProxyServerAddress, ProxyServerPort; NVIDIA
License System User Guide, "Configuring a Licensed Client on Linux"), with HTTP CONNECT: one "CONNECT host:port
HTTP/1.1" request, "200" and then the TLS bytes relayed both ways (RFC 9110 section 9.3.6, as Squid and other
forward proxies do it). This one listens on 127.0.0.1 only, allows the CONNECT targets it is given (403 otherwise, a
proxy's answer to a port it does not allow) or answers 407 when it is told to want credentials, records each target,
and stops with close().
"""
import socket
import threading


class LoopbackServer:
    """A TCP server on 127.0.0.1 (``port``) that hands each connection to ``handle(conn)`` on its accept thread, or
    on a thread of its own with ``threaded``; ``close()`` stops it (the licence service stand-in of the tests too)."""

    threaded = False

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            if self.threaded:
                threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
            else:
                self.handle(conn)

    def handle(self, conn):
        conn.close()

    def close(self):
        self._stop = True
        try:
            # Wakes the accept() of the serving thread; a bare close() would leave the socket listening under it.
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


class ConnectProxy(LoopbackServer):
    threaded = True

    def __init__(self, allow=None, require_auth=False):
        self.allow = set(allow or [])           # {"127.0.0.1:443"}; empty: every target
        self.require_auth = require_auth
        self.targets = []                        # every CONNECT target asked for, in order
        super().__init__()

    def handle(self, conn):
        conn.settimeout(10)
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                chunk = conn.recv(1024)
                if not chunk:
                    return
                head += chunk
            method, target = (head.split(b"\r\n", 1)[0].decode("latin-1").split(" ") + ["", ""])[:2]
            self.targets.append(target)
            if method != "CONNECT":
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                return
            if self.require_auth and b"proxy-authorization:" not in head.lower():
                conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"lab\"\r\n\r\n")
                return
            if self.allow and target not in self.allow:
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                return
            host, _sep, port = target.rpartition(":")
            upstream = socket.create_connection((host, int(port)), timeout=10)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self._relay(conn, upstream)
        except OSError:
            pass
        finally:
            conn.close()

    @staticmethod
    def _relay(a, b):
        def pump(src, dst):
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        other = threading.Thread(target=pump, args=(b, a), daemon=True)
        other.start()
        pump(a, b)
        other.join(10)
        b.close()
