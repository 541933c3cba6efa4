"use client";

import { useCallback, useEffect, useRef, useState } from "react";
import { BatchPanel } from "@/components/batches/panel";
import { FilesSection } from "@/components/files/section";
import { usePanelRequest } from "@/components/batches/panel-state";
import { Badge } from "@/components/ui/badge";
import type { ChatMessage } from "@/lib/api/chat";
import { Chat } from "./chat";
import { useThreads } from "./threads-api";
import { ThreadsMenuButton } from "./threads-drawer";
import { useDismiss } from "./use-dismiss";

/** The badge names the lead's model only: sub-agents and batches run on their own sub-agent's model. */
const OTHERS_HELP =
  "Sub-agents, swarms and batches run on the model their sub-agent names (the batch panel shows each batch's), which may be another one.";

const SIMULATOR_HELP =
  "The lead agent answers with the built-in simulator, as no model endpoint is configured: deterministic replies, no network. " +
  "It understands the phrasings task:, swarm: and batch: (ask it “What can you do?”). " +
  "Set MODEL_BASE_URL, MODEL_API_KEY and MODEL_NAME to use a real model. " +
  OTHERS_HELP;

/** The Simulator badge explains itself: on hover (title) and on click (a small popover). */
function SimulatorBadge() {
  const [open, setOpen] = useState(false);
  const box = useRef<HTMLSpanElement>(null);
  const close = useCallback(() => setOpen(false), []);
  useDismiss(open, close, [box]);
  return (
    <span ref={box} className="relative">
      <button
        type="button"
        data-testid="simulator-badge"
        aria-expanded={open}
        aria-controls="simulator-help"
        title={SIMULATOR_HELP}
        onClick={() => setOpen((o) => !o)}
        className="rounded-full focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-amber-600"
      >
        <Badge tone="amber">
          Lead: Simulator
          <span aria-hidden className="inline-flex size-3.5 items-center justify-center rounded-full border border-current text-[9px] leading-none">
            ?
          </span>
        </Badge>
      </button>
      {open ? (
        <div
          id="simulator-help"
          role="note"
          className="absolute top-8 right-0 z-30 w-72 rounded-lg border border-amber-200 bg-white p-3 text-xs leading-relaxed text-zinc-700 shadow-lg"
        >
          {SIMULATOR_HELP}
        </div>
      ) : null}
    </span>
  );
}

/** How long the server's expectation of a panel holds before what actually rendered decides. */
const PANEL_GRACE_MS = 4_000;

/** The panel's outline while its first data loads (a placeholder: it never counts as content). */
function PanelSkeleton() {
  return (
    <div data-placeholder="" aria-hidden="true" className="animate-pulse space-y-3 p-4">
      <div className="h-5 w-32 rounded bg-zinc-100" />
      <div className="h-24 rounded-lg bg-zinc-100" />
      <div className="h-16 rounded-lg bg-zinc-100" />
    </div>
  );
}

/**
 * A thread: header, chat, and the batch panel. Wide windows show the panel on the right; on a
 * phone it is a drawer opened from the header (it takes no room while closed or empty), so the
 * composer stays at the bottom of the screen.
 */
export function ThreadView({
  thread,
  initialMessages,
  model,
  panelExpected,
}: {
  thread: { id: string; title: string };
  initialMessages: ChatMessage[];
  model: { name: string; simulator: boolean };
  /** The server saw batches, files or a live worker: the panel column will show. */
  panelExpected: boolean;
}) {
  // The sidebar's thread list carries the current title (the first message renames the thread).
  const { data } = useThreads();
  const title = data?.threads.find((t) => t.id === thread.id)?.title ?? thread.title;
  const [drawer, setDrawer] = useState(false);
  // null until the panel or the Files section first shows (or the grace time ends): meanwhile
  // the server's expectation lays out the column, so nothing appears late and moves the chat.
  const [observed, setObserved] = useState<boolean | null>(null);
  const hasPanel = observed ?? panelExpected;
  const panelSlot = useRef<HTMLDivElement>(null);

  // The panel renders nothing without batches or a worker, and the Files section is only a
  // hint (data-placeholder) without files: no button for an empty drawer, no empty column.
  useEffect(() => {
    const el = panelSlot.current;
    if (!el) return;
    let settled = false;
    const update = () => {
      const shown = Array.from(el.children).some((c) => !c.hasAttribute("data-placeholder"));
      if (shown) settled = true;
      if (settled) setObserved(shown);
    };
    const grace = setTimeout(() => {
      settled = true;
      update();
    }, PANEL_GRACE_MS);
    update();
    const observer = new MutationObserver(update);
    observer.observe(el, { childList: true, subtree: true, attributeFilter: ["data-placeholder"] });
    return () => {
      clearTimeout(grace);
      observer.disconnect();
    };
  }, []);
  // "View in batch panel" opens the drawer on a phone.
  usePanelRequest(thread.id, (request) => request.kind === "focus" && setDrawer(true));
  const closeDrawer = useCallback(() => setDrawer(false), []);
  useDismiss(drawer, closeDrawer);

  return (
    <div className="flex min-h-0 flex-1 flex-col lg:flex-row">
      <section aria-label="Chat" className="flex min-h-0 min-w-0 flex-1 flex-col">
        <header data-page-header="" className="flex h-12 shrink-0 items-center gap-2 border-b border-zinc-200 bg-white px-3 md:h-14 md:gap-3 md:px-4">
          <ThreadsMenuButton className="-ml-1" />
          <h1 className="min-w-0 flex-1 truncate text-sm font-semibold">{title}</h1>
          {hasPanel ? (
            <button
              type="button"
              data-testid="batches-drawer-toggle"
              aria-expanded={drawer}
              aria-controls="batch-panel-slot"
              onClick={() => setDrawer((d) => !d)}
              className="rounded-lg border border-zinc-300 px-2.5 py-1 text-xs font-medium text-zinc-700 hover:bg-zinc-50 lg:hidden"
            >
              Batches
            </button>
          ) : null}
          {model.simulator ? (
            <SimulatorBadge />
          ) : (
            <Badge title={`The lead agent's model. ${OTHERS_HELP}`}>
              Lead: {model.name}
            </Badge>
          )}
        </header>
        <Chat threadId={thread.id} initialMessages={initialMessages} />
      </section>
      {drawer ? (
        <button
          type="button"
          aria-label="Close batches"
          className="fixed inset-0 z-30 bg-zinc-900/20 lg:hidden"
          onClick={() => setDrawer(false)}
        />
      ) : null}
      <div
        id="batch-panel-slot"
        ref={panelSlot}
        data-open={drawer}
        className={`shrink-0 bg-white ${hasPanel ? "" : "hidden"} lg:static lg:z-auto lg:h-auto lg:max-h-none lg:w-[26rem] lg:overflow-y-auto lg:rounded-none lg:border-t-0 lg:border-l lg:border-zinc-200 lg:shadow-none ${
          drawer
            ? "fixed inset-x-0 bottom-0 z-40 max-h-[80dvh] overflow-y-auto rounded-t-2xl border-t border-zinc-200 shadow-2xl"
            : "h-0 overflow-hidden"
        }`}
      >
        {observed === null && panelExpected ? <PanelSkeleton /> : null}
        <BatchPanel threadId={thread.id} />
        <FilesSection threadId={thread.id} />
      </div>
    </div>
  );
}
