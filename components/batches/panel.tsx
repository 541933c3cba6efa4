"use client";

/** Batch panel for a thread (built in the panel work; renders nothing until then). */
export function BatchPanel(_props: { threadId: string }) {
  return null;
}
