import { randomBytes } from "node:crypto";
import { streamText } from "ai";
import { createApiToken } from "@/server/auth/tokens";
import { createUser } from "@/server/auth/users";
import { createThread } from "@/server/chat/threads";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { resolveModel } from "@/server/models";

/**
 * Child process of bench/chat.bench.ts, configured by its environment (DATABASE_URL, the model):
 * time to the first text token of a chat turn posted to the chat route (the real handler, bearer
 * token, a new thread per turn, the UI message stream read as it arrives) and of the same model
 * called directly with streamText, alternating, ROUNDS each. Prints {gateway, direct} in ms.
 */

const ROUNDS = Number(process.env.CHAT_BENCH_ROUNDS ?? 40);

async function main() {
  const { POST } = await import("@/app/api/threads/[threadId]/chat/route");
  const db = getDatabase().db;
  const user = await createUser(db, { email: `chat-bench-${randomBytes(5).toString("hex")}@example.com`, password: "bench-password-1" });
  const token = await createApiToken(db, { userId: user.id });
  const model = resolveModel(getConfig());
  const prompt = "Say hello in one short sentence.";

  const gateway = async () => {
    const thread = await createThread(db, { userId: user.id });
    const t0 = performance.now();
    const res = await POST(
      new Request(`http://localhost:3000/api/threads/${thread.id}/chat`, {
        method: "POST",
        headers: { host: "localhost:3000", authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ message: { id: `m${randomBytes(4).toString("hex")}`, role: "user", parts: [{ type: "text", text: prompt }] } }),
      }),
      { params: Promise.resolve({ threadId: thread.id }) },
    );
    if (res.status !== 200) throw new Error(`chat: HTTP ${res.status} ${await res.text()}`);
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let first = Number.NaN;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (Number.isNaN(first) && value.includes('"type":"text-delta"')) first = performance.now() - t0;
    }
    if (Number.isNaN(first)) throw new Error("chat: no text-delta in the stream");
    return first;
  };
  const direct = async () => {
    const t0 = performance.now();
    const result = streamText({ model: model.model, messages: [{ role: "user", content: prompt }] });
    let first = Number.NaN;
    for await (const part of result.fullStream) {
      if (Number.isNaN(first) && part.type === "text-delta") first = performance.now() - t0;
    }
    if (Number.isNaN(first)) throw new Error("direct: no text-delta");
    return first;
  };
  await gateway(); // warm-up: module loading, prepared statements
  await direct();
  const out = { gateway: [] as number[], direct: [] as number[] };
  for (let i = 0; i < ROUNDS; i++) {
    out.gateway.push(await gateway());
    out.direct.push(await direct());
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
  await getDatabase().close();
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
