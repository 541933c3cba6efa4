import net, { type AddressInfo } from "node:net";
import type http from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { createFrontDoorServer } from "@/server/http/front-door";

/**
 * The front door cuts a response whose client stopped reading (bytes queued, none drained for
 * the window), over real sockets: a client that never reads a large download loses its
 * connection; one that reads slowly, and a response that is only quiet, keep theirs.
 */

const STALL_MS = 600;
const servers: http.Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

/** `/big`: up to 256 MiB, written as fast as the socket takes it. `/quiet`: one line now, one after `ms`. */
async function server() {
  const closed: Record<string, Promise<{ finished: boolean; afterMs: number }>> = {};
  const started = Date.now();
  const srv = createFrontDoorServer(
    (req, res) => {
      const url = new URL(req.url ?? "/", "http://x");
      closed[url.pathname] = new Promise((resolve) =>
        res.once("close", () => resolve({ finished: res.writableFinished, afterMs: Date.now() - started })),
      );
      res.writeHead(200, { "content-type": "application/octet-stream" });
      if (url.pathname === "/quiet") {
        res.write("first\n");
        setTimeout(() => res.end("second\n"), Number(url.searchParams.get("ms")));
        return;
      }
      const chunk = Buffer.alloc(1024 * 1024, 120);
      let left = 256;
      const pump = () => {
        while (left > 0 && !res.destroyed) {
          left--;
          if (left === 0) return void res.end(chunk);
          if (!res.write(chunk)) return void res.once("drain", pump);
        }
      };
      pump();
    },
    { stalledReaderMs: STALL_MS },
  );
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  servers.push(srv);
  return { port: (srv.address() as AddressInfo).port, closed };
}

/** A raw client that sends `path`'s request and then reads as `read` says. */
function client(port: number, path: string, read: "never" | "slowly" | "all") {
  const socket = net.connect(port, "127.0.0.1");
  socket.setNoDelay(true);
  let received = 0;
  const ended = new Promise<{ received: number; text: string }>((resolve) => {
    let text = "";
    socket.on("data", (d) => {
      received += d.length;
      if (read === "all" && text.length < 4096) text += d.toString("latin1");
      if (read === "slowly") {
        // About 2 MiB/s: well under what the server writes, but never a window without a read.
        socket.pause();
        setTimeout(() => socket.resume(), Math.max(1, Math.round(d.length / 2048)));
      }
    });
    socket.on("close", () => resolve({ received, text }));
    socket.on("error", () => {});
  });
  socket.write(`GET ${path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
  if (read === "never") socket.pause();
  return { socket, ended, received: () => received };
}

describe("a response the client stopped reading", () => {
  it("loses its connection once nothing queued drained for the window, not sooner", async () => {
    const srv = await server();
    const c = client(srv.port, "/big", "never");
    await new Promise((r) => setTimeout(r, STALL_MS / 2));
    expect(srv.closed["/big"]).toBeDefined();
    const { finished, afterMs } = await srv.closed["/big"]!;
    // Cut, not completed: 256 MiB never fit in the socket buffers of a client that reads nothing.
    expect(finished).toBe(false);
    expect(afterMs).toBeGreaterThanOrEqual(STALL_MS);
    expect(afterMs).toBeLessThan(STALL_MS + 5_000);
    c.socket.resume();
    const { received } = await c.ended;
    expect(received).toBeLessThan(256 * 1024 * 1024);
  });

  it("keeps a client that reads slowly and a response that is only quiet", async () => {
    const srv = await server();
    const slow = client(srv.port, "/big", "slowly");
    const quiet = client(srv.port, `/quiet?ms=${STALL_MS * 3}`, "all");
    // Three windows: a stalled reader would have been cut twice over.
    await new Promise((r) => setTimeout(r, STALL_MS * 3));
    expect(slow.socket.destroyed).toBe(false);
    expect(slow.received()).toBeGreaterThan(0);
    const { text } = await quiet.ended;
    expect(text).toContain("first\n");
    expect(text).toContain("second\n");
    expect((await srv.closed["/quiet"]!).finished).toBe(true);
    slow.socket.destroy();
  });
});
