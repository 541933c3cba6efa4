import type { AddressInfo } from "node:net";
import { trace } from "@opentelemetry/api";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createFrontDoorServer } from "@/server/http/front-door";
import { initTelemetry, shutdownTelemetry } from "@/server/telemetry";
import { send } from "../helpers/web-server";
import { type Receiver, startReceiver } from "./receiver";

/**
 * The front door's SERVER span lasts until the handler behind it has settled, not only until the
 * response closed: Next (base-server's handleRequest) sets `http.route` on its parent span when
 * its handling settles, which for a streamed body comes after the response's close. Ended at the
 * close, that was an "operation on ended Span" warning for each request with tracing on.
 */

const SERVER = 2; // OTLP SpanKind
let receiver: Receiver;

beforeAll(async () => {
  receiver = await startReceiver();
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.endpoint;
  process.env.OTEL_EXPORTER_OTLP_PROTOCOL = "http/json";
  await initTelemetry("flotilla-web");
});
afterAll(async () => {
  await shutdownTelemetry();
  await receiver?.close();
  delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  delete process.env.OTEL_EXPORTER_OTLP_PROTOCOL;
});

describe("the front door's request span", () => {
  it("takes what the handler sets on it after the response closed, with no warning about an ended span", async () => {
    const warn = vi.spyOn(console, "warn");
    let settled!: () => void;
    const handlerSettled = new Promise<void>((resolve) => (settled = resolve));
    // As Next does: the response ends, then (once it has closed) the route goes on the parent span.
    const server = createFrontDoorServer(async (_req, res) => {
      const parent = trace.getActiveSpan();
      const closed = new Promise((resolve) => res.once("close", resolve));
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("ok");
      await closed;
      await new Promise((resolve) => setImmediate(resolve));
      parent?.setAttribute("http.route", "/api/things/[id]");
      settled();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const res = await send({ port: (server.address() as AddressInfo).port }, "/api/things/1");
      expect(res.status).toBe(200);
      await handlerSettled;
      await shutdownTelemetry(); // flushes the span
      const span = receiver.spans().find((s) => s.kind === SERVER && s.attributes["url.path"] === "/api/things/1");
      expect(span).toBeDefined();
      expect(span!.attributes).toMatchObject({ "http.route": "/api/things/[id]", "http.response.status_code": 200 });
      const ended = warn.mock.calls.filter((args) => args.some((a) => String(a).includes("ended Span")));
      expect(ended).toEqual([]);
    } finally {
      warn.mockRestore();
      server.close();
    }
  });
});
