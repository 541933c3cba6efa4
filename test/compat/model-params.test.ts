import type { ChildProcess } from "node:child_process";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";
import type { TestDatabase } from "../helpers/db";
import { type CompatServer, startCompatServer } from "./http-server";
import { jsonl, spawnWorker, stopWorker, until } from "./support";

/**
 * A catalog model behind a local OpenAI-compatible fake: what each batch request carries
 * (system prompt, the whole conversation, temperature, top_p, max tokens, stop sequences) must
 * reach the model, and its answer and usage must come back in the provider's result shapes.
 */

let tdb: TestDatabase;
let fake: FakeOpenAI;
let server: CompatServer;
let worker: ChildProcess | undefined;
let user: TestUser;

beforeAll(async () => {
  tdb = await setupApiDatabase();
  fake = await startFakeOpenAI({
    handler: () => ({ type: "text", text: "Fake model answer.", usage: { prompt_tokens: 31, completion_tokens: 4 } }),
  });
  const modelEnv = { MODEL_BASE_URL: fake.url, MODEL_NAME: "fake-model" };
  // The web side validates model names against its own catalog ("default" comes from MODEL_*).
  Object.assign(process.env, modelEnv);
  server = await startCompatServer();
  user = await makeUser(tdb, "params");
  worker = spawnWorker(tdb, modelEnv);
});

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
  await fake?.close();
});

const chat = () => fake.requests.map((r) => r.body!).filter((b) => Array.isArray(b.messages));

describe("request parameters reach the model", () => {
  it("OpenAI lines: system and developer prompts, conversation, temperature, top_p, max tokens, stop", async () => {
    const client = new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: user.token, maxRetries: 0 });
    const line = {
      custom_id: "p1",
      method: "POST",
      url: "/v1/chat/completions",
      body: {
        model: "default",
        messages: [
          { role: "system", content: "Be terse." },
          { role: "user", content: "First question" },
          { role: "assistant", content: "First answer" },
          { role: "user", content: "openai follow-up" },
        ],
        temperature: 1.25,
        top_p: 0.5,
        max_completion_tokens: 55,
        stop: "STOP",
      },
    };
    const file = await client.files.create({ file: await toFile(Buffer.from(jsonl([JSON.stringify(line)])), "p.jsonl"), purpose: "batch" });
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const done = await until(
      () => client.batches.retrieve(batch.id),
      (b) => b.status === "completed",
    );
    const body = chat().find((b) => JSON.stringify(b.messages).includes("openai follow-up"))!;
    expect(body.model).toBe("fake-model");
    expect(body.messages).toEqual([
      { role: "system", content: "Be terse." },
      { role: "user", content: "First question" },
      { role: "assistant", content: "First answer" },
      { role: "user", content: "openai follow-up" },
    ]);
    expect(body).toMatchObject({ temperature: 1.25, top_p: 0.5, max_tokens: 55, stop: ["STOP"] });

    const out = (await (await client.files.content(done.output_file_id!)).text()).trim().split("\n").map((l) => JSON.parse(l));
    expect(out[0].response.body.choices[0].message.content).toBe("Fake model answer.");
    expect(out[0].response.body.model).toBe("default");
    expect(out[0].response.body.usage).toEqual({ prompt_tokens: 31, completion_tokens: 4, total_tokens: 35 });
  });

  it("Anthropic params: system, messages, temperature, max_tokens, stop_sequences", async () => {
    const client = new Anthropic({ baseURL: server.origin, apiKey: user.token, maxRetries: 0 });
    const created = await client.messages.batches.create({
      requests: [
        {
          custom_id: "a1",
          params: {
            model: "default",
            system: [{ type: "text", text: "You are a poet." }],
            max_tokens: 77,
            stop_sequences: ["END", "FIN"],
            messages: [{ role: "user", content: "anthropic question" }],
            // Not in this SDK's types any more, but the Messages API (and Flotilla) take it.
            ...({ temperature: 0.25 } as object),
          },
        },
      ],
    });
    await until(
      () => client.messages.batches.retrieve(created.id),
      (b) => b.processing_status === "ended",
    );
    const body = chat().find((b) => JSON.stringify(b.messages).includes("anthropic question"))!;
    expect(body.messages).toEqual([
      { role: "system", content: "You are a poet." },
      { role: "user", content: "anthropic question" },
    ]);
    expect(body).toMatchObject({ temperature: 0.25, max_tokens: 77, stop: ["END", "FIN"] });
    const lines = [];
    for await (const l of await client.messages.batches.results(created.id)) lines.push(l);
    expect(lines[0]!.result).toMatchObject({
      type: "succeeded",
      message: { content: [{ type: "text", text: "Fake model answer." }], usage: { input_tokens: 31, output_tokens: 4 } },
    });
  });
});
