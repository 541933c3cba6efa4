import "server-only";
import { createUIMessageStreamResponse } from "ai";
import { readChatStream } from "@/server/chat/streams";
import type { Db } from "@/server/db/client";

/**
 * A chat stream as the AI SDK's UI message stream response, never gzipped: `no-transform` makes
 * Next's compression pass it through. Compressing the stream flushed a deflate block per chunk
 * and cost the web process ~11 ms of CPU a turn at load 15 (a CPU profile of 50 turns: zlib's
 * processChunk beside the stream's own work, issue 44), on the first token's path; the chunks are
 * small and a reply is a few KB, so there is nothing worth compressing.
 */
export function chatStreamResponse(db: Db, streamId: string): Response {
  return createUIMessageStreamResponse({
    stream: readChatStream(db, { streamId }),
    headers: { "cache-control": "no-cache, no-transform" },
  });
}
