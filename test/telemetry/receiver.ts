import http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A local OTLP/HTTP trace receiver: collects every POST to /v1/traces and decodes its spans,
 * http/json as JSON and http/protobuf with a small reader of the protobuf wire format (only the
 * fields the suites look at: span ids, parent, name, kind and attributes).
 */

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  service: string;
}

export interface Receiver {
  endpoint: string;
  requests: Array<{ path: string; contentType: string; body: Buffer }>;
  spans(): ReceivedSpan[];
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const requests: Receiver["requests"] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      requests.push({ path: req.url ?? "", contentType: req.headers["content-type"] ?? "", body: Buffer.concat(chunks) });
      const json = (req.headers["content-type"] ?? "").includes("json");
      res.writeHead(200, { "content-type": json ? "application/json" : "application/x-protobuf" }).end(json ? "{}" : "");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    spans: () => requests.filter((r) => r.path === "/v1/traces").flatMap(decodeRequest),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function decodeRequest(r: { contentType: string; body: Buffer }): ReceivedSpan[] {
  return r.contentType.includes("json") ? fromJson(JSON.parse(r.body.toString("utf8"))) : fromProtobuf(r.body);
}

// --- http/json -----------------------------------------------------------------------------

type JsonValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number; arrayValue?: { values: JsonValue[] } };
type JsonKv = { key: string; value: JsonValue };

function jsonValue(v: JsonValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return v.arrayValue.values.map(jsonValue);
  return undefined;
}

const jsonAttrs = (kvs: JsonKv[] = []) => Object.fromEntries(kvs.map((kv) => [kv.key, jsonValue(kv.value)]));

function fromJson(body: {
  resourceSpans: Array<{
    resource: { attributes: JsonKv[] };
    scopeSpans: Array<{ spans: Array<{ traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number; attributes: JsonKv[] }> }>;
  }>;
}): ReceivedSpan[] {
  return body.resourceSpans.flatMap((rs) => {
    const service = String(jsonAttrs(rs.resource.attributes)["service.name"]);
    return rs.scopeSpans.flatMap((ss) =>
      ss.spans.map((s) => ({
        traceId: s.traceId,
        spanId: s.spanId,
        parentSpanId: s.parentSpanId ?? "",
        name: s.name,
        kind: s.kind,
        attributes: jsonAttrs(s.attributes),
        service,
      })),
    );
  });
}

// --- http/protobuf (opentelemetry/proto/trace/v1/trace.proto) ---------------------------------

type Field = { no: number; varint?: bigint; bytes?: Buffer; fixed?: Buffer };

function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  let pos = 0;
  const varint = () => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[pos++]!;
      result |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return result;
      shift += 7n;
    }
  };
  while (pos < buf.length) {
    const key = Number(varint());
    const no = key >> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ no, varint: varint() });
    else if (wire === 2) {
      const len = Number(varint());
      out.push({ no, bytes: buf.subarray(pos, pos + len) });
      pos += len;
    } else if (wire === 1 || wire === 5) {
      const len = wire === 1 ? 8 : 4;
      out.push({ no, fixed: buf.subarray(pos, pos + len) });
      pos += len;
    } else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

const sub = (buf: Buffer, no: number) => fields(buf).filter((f) => f.no === no && f.bytes).map((f) => f.bytes!);

function anyValue(buf: Buffer): unknown {
  const [f] = fields(buf);
  if (!f) return undefined;
  if (f.no === 1) return f.bytes!.toString("utf8");
  if (f.no === 2) return f.varint !== 0n;
  if (f.no === 3) return Number(BigInt.asIntN(64, f.varint!));
  if (f.no === 4) return f.fixed!.readDoubleLE(0);
  if (f.no === 5) return sub(f.bytes!, 1).map(anyValue);
  return undefined;
}

function pbAttrs(bufs: Buffer[]): Record<string, unknown> {
  return Object.fromEntries(bufs.map((kv) => [sub(kv, 1)[0]?.toString("utf8") ?? "", anyValue(sub(kv, 2)[0] ?? Buffer.alloc(0))]));
}

function fromProtobuf(body: Buffer): ReceivedSpan[] {
  return sub(body, 1).flatMap((rs) => {
    const service = String(pbAttrs(sub(sub(rs, 1)[0] ?? Buffer.alloc(0), 1))["service.name"]);
    return sub(rs, 2).flatMap((ss) =>
      sub(ss, 2).map((span) => {
        const fs = fields(span);
        const bytes = (no: number) => fs.find((f) => f.no === no)?.bytes ?? Buffer.alloc(0);
        return {
          traceId: bytes(1).toString("hex"),
          spanId: bytes(2).toString("hex"),
          parentSpanId: bytes(4).toString("hex"),
          name: bytes(5).toString("utf8"),
          kind: Number(fs.find((f) => f.no === 6)?.varint ?? 0n),
          attributes: pbAttrs(fs.filter((f) => f.no === 9).map((f) => f.bytes!)),
          service,
        };
      }),
    );
  });
}
