import { streamText } from "ai";
import { getConfig } from "@/server/config/load";
import { resolveModel } from "@/server/models";

/**
 * Child process of bench/chat.bench.ts, configured by the same environment as the web process it
 * is compared with (the model): time to the first text token of the model called directly with
 * streamText, ROUNDS times. Prints one JSON line {"direct": [ms, ...]}; it opens no database.
 */

const ROUNDS = Number(process.env.CHAT_BENCH_ROUNDS ?? 40);

async function main() {
  const model = resolveModel(getConfig());
  const direct = async () => {
    const t0 = performance.now();
    const result = streamText({ model: model.model, messages: [{ role: "user", content: "Say hello in one short sentence." }] });
    let first = Number.NaN;
    for await (const part of result.fullStream) {
      if (Number.isNaN(first) && part.type === "text-delta") first = performance.now() - t0;
    }
    if (Number.isNaN(first)) throw new Error("direct: no text-delta");
    return first;
  };
  await direct(); // warm-up
  const out: number[] = [];
  for (let i = 0; i < ROUNDS; i++) out.push(await direct());
  process.stdout.write(`${JSON.stringify({ direct: out })}\n`);
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
