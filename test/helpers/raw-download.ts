import net from "node:net";

/**
 * A GET over a raw socket whose reader the test paces: it reads nothing past the response head
 * until told to, so the server meets a client exactly as slow as the test makes it (TCP flow
 * control, no client-side buffering beyond the kernel's). A complete chunked body ends with the
 * terminal chunk; a response the server cut ends without it.
 */
export interface RawDownload {
  /** The status line's code, once the head arrived. */
  status: Promise<number>;
  /** Bytes read so far (head included). */
  bytes(): number;
  /** Reads one chunk (at most one socket read) now. */
  readOne(): void;
  /** Reads everything from now on. */
  readAll(): void;
  /** The socket closed: `complete` when the body ended with the terminal chunk; `body` de-chunked; `error` the socket's error code (ECONNRESET for a reset). */
  closed: Promise<{ complete: boolean; bytes: number; body: string; error?: string }>;
  /** The client goes away. */
  destroy(): void;
  /** The client socket's local port (which the server sees as the peer's), once connected. */
  localPort(): number | undefined;
}

export function rawDownload(port: number, path: string, headers: Record<string, string>, from?: string): RawDownload {
  const socket = net.connect({ host: "127.0.0.1", port, localAddress: from });
  const chunks: Buffer[] = [];
  let size = 0;
  let flowing = false;
  let head = false;
  let resolveStatus!: (code: number) => void;
  const status = new Promise<number>((resolve) => {
    resolveStatus = resolve;
  });
  socket.on("connect", () => {
    const lines = Object.entries({ host: "127.0.0.1", connection: "close", ...headers }).map(([k, v]) => `${k}: ${v}\r\n`);
    socket.write(`GET ${path} HTTP/1.1\r\n${lines.join("")}\r\n`);
  });
  socket.on("data", (chunk: Buffer) => {
    chunks.push(chunk);
    size += chunk.length;
    if (!head) {
      const line = /^HTTP\/1\.1 (\d{3})[^\n]*\n/.exec(Buffer.concat(chunks).toString("latin1"));
      if (!line) return;
      head = true;
      resolveStatus(Number(line[1]));
    }
    // Past the status line, read no further than the test says.
    if (!flowing) socket.pause();
  });
  const closed = new Promise<{ complete: boolean; bytes: number; body: string; error?: string }>((resolve) => {
    let error: string | undefined;
    socket.on("error", (err: NodeJS.ErrnoException) => {
      error ??= err.code ?? err.message;
    });
    socket.on("close", () => {
      resolveStatus(0);
      const all = Buffer.concat(chunks);
      resolve({ complete: all.subarray(-7).toString("latin1") === "\r\n0\r\n\r\n", bytes: all.length, body: bodyOf(all), ...(error ? { error } : {}) });
    });
  });
  return {
    status,
    bytes: () => size,
    readOne: () => socket.resume(),
    readAll: () => {
      flowing = true;
      socket.resume();
    },
    closed,
    destroy: () => socket.destroy(),
    localPort: () => socket.localPort,
  };
}

/** The body after the head: de-chunked when the response is chunked (a cut one as far as it got). */
function bodyOf(response: Buffer): string {
  const end = response.indexOf("\r\n\r\n");
  if (end < 0) return "";
  const head = response.subarray(0, end).toString("latin1");
  let rest = response.subarray(end + 4);
  if (!/^transfer-encoding: *chunked/im.test(head)) return rest.toString("utf8");
  const parts: Buffer[] = [];
  for (;;) {
    const line = rest.indexOf("\r\n");
    const size = line < 0 ? 0 : Number.parseInt(rest.subarray(0, line).toString("latin1"), 16);
    if (!size) break;
    parts.push(rest.subarray(line + 2, line + 2 + size));
    rest = rest.subarray(line + 2 + size + 2);
  }
  return Buffer.concat(parts).toString("utf8");
}
