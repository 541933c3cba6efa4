"use client";

import Link from "next/link";
import { usePathname } from "next/navigation";
import { signOut } from "next-auth/react";
import { useEffect, useState } from "react";
import { Button } from "@/components/ui/button";
import { SettledBadge } from "@/components/batches/notifications";
import { NewThreadButton } from "./new-thread-button";
import { type ThreadSummary, useThreads } from "./threads-api";

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
  const [open, setOpen] = useState(false);
  const threads = data?.threads ?? initialThreads;

  // Close the drawer after navigating.
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs on path changes only
  useEffect(() => setOpen(false), [pathname]);

  return (
    <>
      <div className="flex h-12 shrink-0 items-center gap-2 border-b border-zinc-200 bg-white px-3 md:hidden">
        <Button variant="ghost" size="sm" aria-expanded={open} aria-controls="thread-sidebar" onClick={() => setOpen((o) => !o)}>
          ☰ Threads
        </Button>
        <Link href="/" className="text-sm font-semibold tracking-tight">
          Flotilla
        </Link>
      </div>
      {open && (
        <button
          type="button"
          aria-label="Close threads"
          className="fixed inset-0 z-30 bg-zinc-900/20 md:hidden"
          onClick={() => setOpen(false)}
        />
      )}
      <aside
        id="thread-sidebar"
        aria-label="Threads"
        className={`${open ? "fixed inset-y-0 left-0 z-40 flex shadow-xl" : "hidden"} w-72 shrink-0 flex-col border-r border-zinc-200 bg-white md:static md:flex md:w-64 md:shadow-none`}
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
              {threads.map((t) => {
                const current = pathname === `/threads/${t.id}`;
                return (
                  <li key={t.id}>
                    <Link
                      href={`/threads/${t.id}`}
                      aria-current={current ? "page" : undefined}
                      className={`block rounded-lg px-3 py-2 ${current ? "bg-zinc-100 text-zinc-900" : "text-zinc-700 hover:bg-zinc-50"}`}
                    >
                      <span className="flex items-center gap-2">
                        <span className="block min-w-0 truncate text-sm font-medium">{t.title}</span>
                        <SettledBadge threadId={t.id} current={current} />
                      </span>
                      <span className="block text-xs text-zinc-500" suppressHydrationWarning>
                        {relativeTime(t.updated_at)}
                      </span>
                    </Link>
                  </li>
                );
              })}
            </ul>
          )}
        </nav>
        <div className="flex items-center gap-2 border-t border-zinc-200 px-3 py-3">
          <Link href="/workers" aria-current={pathname === "/workers" ? "page" : undefined} className="text-xs font-medium text-zinc-600 hover:text-zinc-900">Workers</Link>
          <Link href="/settings" aria-current={pathname === "/settings" ? "page" : undefined} className="text-xs font-medium text-zinc-600 hover:text-zinc-900">Settings</Link>
          <span className="min-w-0 flex-1 truncate text-xs text-zinc-500" title={email}>
            {email}
          </span>
          <Button variant="ghost" size="sm" onClick={() => signOut({ callbackUrl: "/signin" })}>
            Sign out
          </Button>
        </div>
      </aside>
    </>
  );
}
