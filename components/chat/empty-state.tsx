"use client";

import { useState } from "react";
import { useBatchPanelRequests } from "@/components/batches/panel-state";

/** One example per way of working, in the simulator's phrasings (a real model understands them too). */
export const EXAMPLE_PROMPTS = [
  { label: "Ask directly", text: "What can you do?" },
  { label: "One sub-agent (task)", text: "task: list three surprising facts about tides" },
  { label: "A swarm in parallel", text: "swarm: Write one line about {{item}} | the sea; the moon; the wind" },
  { label: "A durable batch", text: "batch: Summarize the history of {{item}} | Lisbon; Nairobi; Osaka; Lima; Oslo" },
] as const;

/** The first minute of a thread: what the agent can do, as buttons that fill the composer. */
export function EmptyState({ threadId, onPick }: { threadId: string; onPick: (text: string) => void }) {
  const [noWorker, setNoWorker] = useState(false);
  const { openNewBatch } = useBatchPanelRequests(threadId);
  return (
    <section aria-label="Get started" className="mx-auto max-w-xl py-10 text-center">
      <p className="font-medium text-zinc-800">New conversation</p>
      <p className="mt-1 text-sm text-zinc-500">
        Ask anything. The lead agent answers directly, or hands work to one sub-agent, a parallel swarm, or a durable
        batch that runs in the background. Try one:
      </p>
      <ul className="mt-5 grid grid-cols-1 gap-2 text-left sm:grid-cols-2">
        {EXAMPLE_PROMPTS.map((p) => (
          <li key={p.label} className="min-w-0">
            <button
              type="button"
              data-testid="example-prompt"
              onClick={() => onPick(p.text)}
              className="h-full w-full min-w-0 overflow-hidden rounded-xl border border-zinc-200 bg-white px-3 py-2 text-left shadow-xs hover:border-zinc-300 hover:bg-zinc-50 focus-visible:outline-2 focus-visible:outline-sky-600"
            >
              <span className="block text-xs font-medium text-zinc-500">{p.label}</span>
              <span className="mt-0.5 block truncate font-mono text-[13px] text-zinc-800" title={p.text}>
                {p.text}
              </span>
            </button>
          </li>
        ))}
        <li className="min-w-0 sm:col-span-2">
          <button
            type="button"
            data-testid="example-new-batch"
            onClick={() => setNoWorker(!openNewBatch())}
            className="w-full rounded-xl border border-dashed border-zinc-300 bg-white px-3 py-2 text-left hover:bg-zinc-50 focus-visible:outline-2 focus-visible:outline-sky-600"
          >
            <span className="block text-xs font-medium text-zinc-500">From a file</span>
            <span className="mt-0.5 block text-[13px] text-zinc-800">New batch from a file (CSV, JSONL or one item per line)…</span>
          </button>
          {noWorker ? (
            <p role="status" className="mt-1 text-xs text-amber-800">
              Batches need a worker: start one with <code className="font-mono">npm run worker</code>, then try again.
            </p>
          ) : null}
        </li>
      </ul>
    </section>
  );
}
