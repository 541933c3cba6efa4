/**
 * Provider-style ids over our uuids: `file-<hex>`, `batch_<hex>`, `msgbatch_<hex>`. A batch's
 * output and error files are virtual (generated from its items): `file-batch_<hex>-output` and
 * `file-batch_<hex>-errors`. Anything that does not parse names nothing (404).
 */

const HEX = /^[0-9a-f]{32}$/;

const toHex = (uuid: string) => uuid.replace(/-/g, "");
function toUuid(hex: string): string | null {
  if (!HEX.test(hex)) return null;
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export const fileId = (uuid: string) => `file-${toHex(uuid)}`;
export const openAiBatchId = (uuid: string) => `batch_${toHex(uuid)}`;
export const anthropicBatchId = (uuid: string) => `msgbatch_${toHex(uuid)}`;
export const outputFileId = (uuid: string) => `file-batch_${toHex(uuid)}-output`;
export const errorFileId = (uuid: string) => `file-batch_${toHex(uuid)}-errors`;
export const requestId = (itemUuid: string) => `req_${toHex(itemUuid)}`;
export const completionId = (itemUuid: string) => `chatcmpl-${toHex(itemUuid)}`;
export const messageId = (itemUuid: string) => `msg_${toHex(itemUuid)}`;

export type ParsedFileId = { kind: "upload"; id: string } | { kind: "output" | "errors"; batchId: string };

export function parseFileId(value: string): ParsedFileId | null {
  const virtual = /^file-batch_([0-9a-f]{32})-(output|errors)$/.exec(value);
  if (virtual) {
    const batchId = toUuid(virtual[1]!);
    return batchId ? { kind: virtual[2] as "output" | "errors", batchId } : null;
  }
  const upload = /^file-([0-9a-f]{32})$/.exec(value);
  const id = upload ? toUuid(upload[1]!) : null;
  return id ? { kind: "upload", id } : null;
}

export function parseOpenAiBatchId(value: string): string | null {
  const m = /^batch_([0-9a-f]{32})$/.exec(value);
  return m ? toUuid(m[1]!) : null;
}

export function parseAnthropicBatchId(value: string): string | null {
  const m = /^msgbatch_([0-9a-f]{32})$/.exec(value);
  return m ? toUuid(m[1]!) : null;
}
