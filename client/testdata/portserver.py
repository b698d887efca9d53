# A server for the port tests: run in a workspace's sandbox as
# python3 portserver.py PORT. GET /ws upgrades to a byte echo, GET /stream
# sends a line, waits for /workspace/go, then sends another, and any other
# request is answered with what the server was sent; GET /quit ends it.
import http.server, os, sys, time

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/quit":
            os._exit(0)
        if self.path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while True:
                b = self.connection.recv(65536)
                if not b:
                    return
                self.connection.sendall(b)
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b"first\n")
            while not os.path.exists("/workspace/go"):
                time.sleep(0.01)
            self.chunk(b"second\n")
            self.chunk(b"")
            return
        if self.path.startswith("/bytes/"):
            n = int(self.path[len("/bytes/"):])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = b"x" * 65536
            while n > 0:
                k = min(n, len(block))
                self.wfile.write(block[:k])
                n -= k
            return
        body = ("path=%s prefix=%s auth=%s host=%s\n" % (self.path, self.headers.get("X-Forwarded-Prefix"),
                self.headers.get("Authorization"), self.headers.get("Host"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def chunk(self, b):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
