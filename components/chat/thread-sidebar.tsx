"use client";

import Link from "next/link";
import { usePathname, useRouter } from "next/navigation";
import { signOut } from "next-auth/react";
import { type ReactNode, useCallback, useEffect, useRef, useState } from "react";
import { Button } from "@/components/ui/button";
import { SettledBadge } from "@/components/batches/notifications";
import { usePendingReviews } from "@/components/review/api";
import { NewThreadButton } from "./new-thread-button";
import { ThreadsMenuButton, useThreadsDrawer } from "./threads-drawer";
import { useDismiss } from "./use-dismiss";
import { type ThreadSummary, useDeleteThread, useRenameThread, useThreads } from "./threads-api";

function relativeTime(iso: string): string {
  const seconds = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

/** Threads of the signed-in user, newest activity first; a drawer on narrow windows. */
export function ThreadSidebar({ initialThreads, email }: { initialThreads: ThreadSummary[]; email: string }) {
  const pathname = usePathname();
  const { data } = useThreads(initialThreads);
  const { open, setOpen } = useThreadsDrawer();
  const close = useCallback(() => setOpen(false), [setOpen]);
  useDismiss(open, close);
  const threads = data?.threads ?? initialThreads;

  return (
    <>
      <SkipLink />
      {/* The phone's header row on pages without their own (a thread's header carries the button itself). */}
      <div data-app-bar="" className="flex h-12 shrink-0 items-center gap-2 border-b border-zinc-200 bg-white px-3 md:hidden">
        <ThreadsMenuButton />
        <Link href="/" className="text-sm font-semibold tracking-tight">
          Flotilla
        </Link>
      </div>
      {open && <button type="button" aria-label="Close threads" className="fixed inset-0 z-30 bg-zinc-900/20 md:hidden" onClick={close} />}
      <aside
        id="thread-sidebar"
        aria-label="Threads"
        className={`${open ? "fixed inset-y-0 left-0 z-40 flex shadow-xl" : "hidden"} w-72 max-w-[85vw] shrink-0 flex-col border-r border-zinc-200 bg-white md:static md:flex md:w-64 md:shadow-none`}
      >
        <div className="flex h-14 items-center px-4">
          <Link href="/" className="text-base font-semibold tracking-tight">
            Flotilla
          </Link>
        </div>
        <NewThreadButton className="px-3 pb-3" />
        <nav className="min-h-0 flex-1 overflow-y-auto px-2 pb-3">
          {threads.length === 0 ? (
            <p className="px-2 py-4 text-sm text-zinc-500">No threads yet.</p>
          ) : (
            <ul className="space-y-0.5">
              {threads.map((t) => (
                <ThreadRow key={t.id} thread={t} current={pathname === `/threads/${t.id}`} />
              ))}
            </ul>
          )}
        </nav>
        <AccountFooter email={email} pathname={pathname} />
      </aside>
    </>
  );
}

/** Where the person is signed in: the whole email (wrapped, never cut to "admi…"), the app pages and Sign out. */
function AccountFooter({ email, pathname }: { email: string; pathname: string }) {
  const link = (href: string, label: string) => (
    <Link
      href={href}
      aria-current={pathname === href ? "page" : undefined}
      className="text-xs font-medium text-zinc-600 hover:text-zinc-900 aria-[current=page]:text-zinc-900"
    >
      {label}
    </Link>
  );
  return (
    <div className="space-y-1.5 border-t border-zinc-200 px-3 py-3">
      <p data-testid="account-email" className="text-xs break-all text-zinc-600" title={email}>
        {email}
      </p>
      {/* Wraps rather than squeezing: with a pending count, "Sign out" no longer fits beside the links on one line. */}
      <div className="flex flex-wrap items-center gap-x-2.5 gap-y-1">
        <ReviewLink current={pathname === "/review"} />
        {link("/golden-sets", "Golden sets")}
        {link("/workers", "Workers")}
        {link("/settings", "Settings")}
        <Button variant="ghost" size="sm" className="ml-auto" onClick={() => signOut({ callbackUrl: "/signin" })}>
          Sign out
        </Button>
      </div>
    </div>
  );
}

/** The review queue, with how many items wait in it (a badge only when some do). */
function ReviewLink({ current }: { current: boolean }) {
  const pending = usePendingReviews();
  return (
    <Link
      href="/review"
      aria-current={current ? "page" : undefined}
      className="inline-flex items-center gap-1 text-xs font-medium text-zinc-600 hover:text-zinc-900 aria-[current=page]:text-zinc-900"
    >
      Review
      {pending ? (
        <span data-testid="review-pending-count" className="rounded-full bg-amber-100 px-1.5 text-[10px] leading-4 font-semibold text-amber-900 tabular-nums">
          <span className="sr-only">, </span>
          {pending}
          <span className="sr-only"> waiting</span>
        </span>
      ) : null}
    </Link>
  );
}

function MenuItem({ danger = false, onSelect, children }: { danger?: boolean; onSelect: () => void; children: ReactNode }) {
  return (
    <button
      type="button"
      role="menuitem"
      className={`block w-full px-3 py-1.5 text-left ${danger ? "text-red-700 hover:bg-red-50" : "hover:bg-zinc-50"}`}
      onClick={onSelect}
    >
      {children}
    </button>
  );
}

/**
 * The page's first tab stop, shown only when focused: past the thread list, to the message box
 * on a thread's page (else to the page's content).
 */
function SkipLink() {
  const pathname = usePathname();
  const toComposer = pathname.startsWith("/threads/");
  return (
    <a
      href={toComposer ? "#message" : "#main"}
      onClick={(e) => {
        const target = document.getElementById(toComposer ? "message" : "main");
        if (!target) return;
        e.preventDefault();
        if (!toComposer) target.setAttribute("tabindex", "-1");
        target.focus();
      }}
      className="sr-only focus:not-sr-only focus:fixed focus:top-2 focus:left-2 focus:z-50 focus:rounded-md focus:bg-white focus:px-3 focus:py-2 focus:text-sm focus:font-medium focus:text-sky-800 focus:shadow-lg focus:ring-2 focus:ring-sky-600"
    >
      {toComposer ? "Skip to the message box" : "Skip to content"}
    </a>
  );
}

/** One thread in the list: a link, with Rename and Delete behind a small menu. */
function ThreadRow({ thread, current }: { thread: ThreadSummary; current: boolean }) {
  const router = useRouter();
  const rename = useRenameThread();
  const remove = useDeleteThread();
  const [menu, setMenu] = useState(false);
  const [editing, setEditing] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const [title, setTitle] = useState(thread.title);
  const [error, setError] = useState<string | null>(null);
  const input = useRef<HTMLInputElement>(null);
  const menuRef = useRef<HTMLDivElement>(null);
  const menuButton = useRef<HTMLButtonElement>(null);
  const closeMenu = useCallback(() => setMenu(false), []);
  useDismiss(menu, closeMenu, [menuRef, menuButton]);

  useEffect(() => {
    if (editing) input.current?.select();
  }, [editing]);
  // Opened from the keyboard (the row is one tab stop): its first item takes the focus.
  const [menuByKey, setMenuByKey] = useState(false);
  useEffect(() => {
    if (menu && menuByKey) menuRef.current?.querySelector<HTMLElement>('[role="menuitem"]')?.focus();
  }, [menu, menuByKey]);
  function onRowKey(e: React.KeyboardEvent) {
    if (e.key === "ContextMenu" || (e.shiftKey && e.key === "F10") || e.key === "ArrowRight") {
      e.preventDefault();
      setMenuByKey(true);
      setMenu(true);
    }
  }

  function saveTitle() {
    const next = title.trim();
    if (!next || next === thread.title) {
      setEditing(false);
      setTitle(thread.title);
      return;
    }
    setError(null);
    rename.mutate(
      { id: thread.id, title: next },
      { onSuccess: () => setEditing(false), onError: (e) => setError(e.message) },
    );
  }

  if (editing) {
    return (
      <li className="px-1 py-1">
        <form
          onSubmit={(e) => {
            e.preventDefault();
            saveTitle();
          }}
        >
          <input
            ref={input}
            aria-label="Thread title"
            value={title}
            maxLength={200}
            onChange={(e) => setTitle(e.target.value)}
            onBlur={saveTitle}
            onKeyDown={(e) => {
              if (e.key === "Escape") {
                setTitle(thread.title);
                setEditing(false);
              }
            }}
            className="w-full rounded-lg border border-zinc-300 px-2 py-1.5 text-sm focus:border-zinc-500 focus:outline-none"
          />
        </form>
        {error ? <p role="alert" className="px-1 pt-1 text-xs text-red-700">{error}</p> : null}
      </li>
    );
  }

  return (
    <li data-testid="thread-row" className="group relative">
      <Link
        href={`/threads/${thread.id}`}
        aria-current={current ? "page" : undefined}
        // One tab stop per thread: its actions open from here (Shift+F10, the menu key or →).
        aria-keyshortcuts="Shift+F10"
        onKeyDown={onRowKey}
        className={`block rounded-lg py-2 pr-9 pl-3 ${current ? "bg-zinc-100 text-zinc-900" : "text-zinc-700 hover:bg-zinc-50"}`}
      >
        <span className="flex items-center gap-2">
          <span className="block min-w-0 truncate text-sm font-medium">{thread.title}</span>
          <SettledBadge threadId={thread.id} current={current} />
        </span>
        <span className="block text-xs text-zinc-500" suppressHydrationWarning>
          {relativeTime(thread.updated_at)}
        </span>
      </Link>
      <button
        ref={menuButton}
        type="button"
        // A fixed name: a thread's title must not collide with the page's own buttons ("Stop").
        aria-label="Thread actions"
        title={`Rename or delete “${thread.title}”`}
        aria-haspopup="menu"
        aria-expanded={menu}
        tabIndex={-1}
        onClick={() => {
          setMenuByKey(false);
          setMenu((m) => !m);
        }}
        className="absolute top-2 right-1.5 rounded-md px-1.5 py-0.5 text-zinc-500 opacity-100 hover:bg-zinc-200 hover:text-zinc-900 focus-visible:outline-2 focus-visible:outline-zinc-900 md:opacity-0 md:group-hover:opacity-100 md:focus:opacity-100 md:aria-expanded:opacity-100"
      >
        ⋯
      </button>
      {menu ? (
        <div ref={menuRef} role="menu" className="absolute top-9 right-1 z-10 w-36 rounded-lg border border-zinc-200 bg-white py-1 text-sm shadow-lg">
          <MenuItem
            onSelect={() => {
              setMenu(false);
              setTitle(thread.title);
              setEditing(true);
            }}
          >
            Rename
          </MenuItem>
          <MenuItem
            danger
            onSelect={() => {
              setMenu(false);
              setConfirming(true);
            }}
          >
            Delete…
          </MenuItem>
        </div>
      ) : null}
      {confirming ? (
        <div className="fixed inset-0 z-50 flex items-center justify-center bg-zinc-900/30 p-4">
          <div
            role="alertdialog"
            aria-modal="true"
            aria-labelledby={`delete-${thread.id}-title`}
            aria-describedby={`delete-${thread.id}-body`}
            className="w-full max-w-sm rounded-xl bg-white p-4 shadow-xl"
          >
            <h2 id={`delete-${thread.id}-title`} className="font-semibold">
              Delete “{thread.title}”?
            </h2>
            <p id={`delete-${thread.id}-body`} className="mt-2 text-sm text-zinc-600">
              This deletes the conversation, its sub-agent runs and every batch of this thread with its results.
              Batches still running are cancelled first. This cannot be undone.
            </p>
            {remove.error ? (
              <p role="alert" className="mt-2 text-sm text-red-700">
                {remove.error.message}
              </p>
            ) : null}
            <div className="mt-4 flex justify-end gap-2">
              <Button variant="secondary" size="sm" onClick={() => setConfirming(false)} autoFocus>
                Keep it
              </Button>
              <Button
                variant="danger"
                size="sm"
                disabled={remove.isPending}
                onClick={() =>
                  remove.mutate(thread.id, {
                    onSuccess: () => {
                      setConfirming(false);
                      if (current) router.push("/");
                      router.refresh();
                    },
                  })
                }
              >
                {remove.isPending ? "Deleting…" : "Delete thread"}
              </Button>
            </div>
          </div>
        </div>
      ) : null}
    </li>
  );
}
