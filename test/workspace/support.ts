import * as files from "@/app/api/threads/[threadId]/files/[...path]/route";
import * as list from "@/app/api/threads/[threadId]/files/route";
import { type FileProjection, fileUrl } from "@/lib/api/files";
import { buildRequest, type CallOptions, ORIGIN } from "../api/helpers";

/** Calls the workspace route handlers with real Requests, as Next's router would. */

type Handler = (req: Request, ctx: { params: Promise<Record<string, unknown>> }) => Promise<Response>;

export async function callFiles(method: string, path: string, options: CallOptions = {}): Promise<Response> {
  const url = new URL(path, ORIGIN);
  const match = /^\/api\/threads\/([^/]+)\/files(?:\/(.+))?$/.exec(url.pathname);
  if (!match) throw new Error(`no route for ${url.pathname}`);
  const threadId = decodeURIComponent(match[1]!);
  const req = buildRequest(method, url, options);
  if (match[2] === undefined) {
    const handler = (list as Record<string, unknown>)[method] as Handler | undefined;
    if (!handler) throw new Error(`no ${method} handler for ${url.pathname}`);
    return handler(req, { params: Promise.resolve({ threadId }) });
  }
  const handler = (files as Record<string, unknown>)[method] as Handler | undefined;
  if (!handler) throw new Error(`no ${method} handler for ${url.pathname}`);
  const segments = match[2].split("/").map(decodeURIComponent);
  return handler(req, { params: Promise.resolve({ threadId, path: segments }) });
}

export interface UploadPart {
  path: string;
  content: string | Uint8Array;
  type?: string;
}

/** A real multipart body, encoded by the platform's FormData (as a browser would). */
export function uploadForm(parts: UploadPart[], prefix?: string): FormData {
  const form = new FormData();
  if (prefix !== undefined) form.append("prefix", prefix);
  for (const part of parts)
    form.append("file", new Blob([part.content as BlobPart], { type: part.type ?? "text/plain" }), part.path);
  return form;
}

export async function upload(
  threadId: string,
  auth: { token: string },
  parts: UploadPart[],
  prefix?: string,
): Promise<Response> {
  return callFiles("POST", `/api/threads/${threadId}/files`, { token: auth.token, body: uploadForm(parts, prefix) });
}

export async function listPaths(threadId: string, auth: { token: string }): Promise<string[]> {
  const res = await callFiles("GET", `/api/threads/${threadId}/files`, { token: auth.token });
  if (res.status !== 200) throw new Error(`list: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { files: FileProjection[] }).files.map((f) => f.path);
}

export { fileUrl };
