import { readFileSync } from "node:fs";
import path from "node:path";
import { startFakeOpenAI } from "../test/helpers/fake-openai";
import { benchServer } from "./batch.bench";
import { probe } from "./chat.bench";
import { addToStart, efficiency, graphileEfficiency } from "./e2e.bench";
import { exportRow, runParts, runRow, type Scope, submission } from "./scale.bench";
import type { BenchRow } from "./types";

/**
 * `npm run bench -- guard`: a small form of each engine row of issue 44, in a few minutes, each
 * compared with its figure recorded in bench/guard.json. A row more than SLIDE times worse than
 * its recorded figure fails the run (bench/run.ts exits non-zero), so `.ci/run` stops a change
 * that makes a row slide back. Each figure is a ratio against a baseline measured in the same run
 * where there is one (export and submit against PostgreSQL doing the same rows, efficiency against
 * graphile-worker, chat against the model called directly), so a loaded machine moves both sides;
 * the two that are times (a one-item start, the worker's CPU per item) are medians. A row over the
 * line is measured once more before it counts, and the better figure is kept. The recorded figure
 * of each row is the worse of two idle runs on the embedded PostgreSQL, as CI runs it (bench/RESULTS.md
 * has both); re-record them (GUARD_RECORD=1 prints the JSON) when a change makes a row better for
 * good. About 75 s on an idle two-core machine.
 *
 * Not part of a plain `npm run bench`: run it by name.
 */

export const name = "guard";
export const onlyByName = true;

/** How much worse than recorded a row may get before the guard fails. */
const SLIDE = 1.5;

interface Recorded {
  figures: Record<string, number>;
}

type Measure = () => Promise<number>;

const one = async (rows: BenchRow[] | Promise<BenchRow[]>, index = 0) => (await rows)[index]!.ratio;

/** The rows: each returns the figure compared with guard.json (lower is better). */
function measures(adminUrl: string): Record<string, { what: string; measure: Measure }> {
  const scale = (part: (s: Scope) => Promise<BenchRow | BenchRow[]>) => runParts([part], adminUrl);
  return {
    export: {
      what: "results.jsonl of 10,000 items over HTTP / psql COPY of the same rows",
      measure: () => one(scale((s) => exportRow(s, 10_000))),
    },
    submit: {
      what: "submit 10,000 NDJSON items over HTTP / INSERT ... unnest of the same rows",
      measure: () => one(scale((s) => submission(s, 10_000))),
    },
    worker_cpu: {
      what: "5,000 zero-latency items, 1 worker x 64: worker CPU ms per item",
      // The second row of runRow is the worker's CPU per item against 0.4 ms.
      measure: async () => (await scale((s) => runRow(s, 5_000)))[1]!.ours,
    },
    start: {
      what: "one-item batch to an idle worker through npm start: created_at -> started_at p50 ms, 20 rounds",
      measure: async () => (await addToStart(adminUrl, 20))[0]!.ours,
    },
    efficiency: {
      what: "300 items x 200 ms, cap 64, 1 worker x 64 through npm start: wall / graphile-worker's wall",
      measure: async () => (await efficiency(adminUrl, 1, 64, await graphileEfficiency(adminUrl, 300), 300)).ratio,
    },
    chat: {
      what: "chat first token through npm start, simulator, 20 turns: median / (direct streamText + 15 ms)",
      measure: () => probe(adminUrl, { FLOTILLA__SIMULATOR__LATENCY_MS: "0" }, "simulator", 20).then((r) => r.ratio),
    },
    chat_openai: {
      what: "chat first token through npm start, OpenAI-compatible fake, 20 turns: median / (direct streamText + 15 ms)",
      measure: async () => {
        const fake = await startFakeOpenAI({ handler: () => ({ type: "text", text: "Hello there, nice to meet you.", chunkDelayMs: 0 }) });
        try {
          const env = { MODEL_BASE_URL: fake.url, MODEL_API_KEY: "bench-key", MODEL_NAME: "bench-model" };
          return (await probe(adminUrl, env, "OpenAI-compatible fake server", 20)).ratio;
        } finally {
          await fake.close();
        }
      },
    },
  };
}

export async function run(): Promise<BenchRow[]> {
  const recorded = JSON.parse(readFileSync(path.join(process.cwd(), "bench/guard.json"), "utf8")) as Recorded;
  const server = await benchServer();
  const rows: BenchRow[] = [];
  const got: Record<string, number> = {};
  try {
    for (const [key, { what, measure }] of Object.entries(measures(server.adminUrl))) {
      const figure = recorded.figures[key];
      if (figure === undefined) throw new Error(`bench/guard.json: no recorded figure for "${key}"`);
      let ours = await measure();
      if (ours > figure * SLIDE) {
        process.stderr.write(`  guard: ${key} ${ours.toFixed(3)} over ${SLIDE}x its recorded ${figure}; measuring again\n`);
        ours = Math.min(ours, await measure());
      }
      got[key] = ours;
      rows.push({ metric: `guard: ${what} (recorded ${figure})`, ours, baseline: figure, ratio: ours / figure, target: SLIDE });
    }
  } finally {
    await server.stop();
  }
  if (process.env.GUARD_RECORD) console.log(JSON.stringify({ figures: got }, null, 2));
  return rows;
}
