"use client";

import { usePathname } from "next/navigation";
import { createContext, type ReactNode, useContext, useEffect, useMemo, useState } from "react";

/**
 * On a phone the thread list is a drawer. Its button sits in the page's one header row: the
 * thread's own header, or the app bar on pages without one; both open the same drawer.
 */
const DrawerContext = createContext<{ open: boolean; setOpen: (open: boolean) => void }>({ open: false, setOpen: () => {} });

export function ThreadsDrawerProvider({ children }: { children: ReactNode }) {
  const [open, setOpen] = useState(false);
  const pathname = usePathname();
  // Close the drawer after navigating.
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs on path changes only
  useEffect(() => setOpen(false), [pathname]);
  const value = useMemo(() => ({ open, setOpen }), [open]);
  return <DrawerContext.Provider value={value}>{children}</DrawerContext.Provider>;
}

export function useThreadsDrawer() {
  return useContext(DrawerContext);
}

/** The ☰ button of a phone's header row (hidden on wide windows, where the list is always shown). */
export function ThreadsMenuButton({ className = "" }: { className?: string }) {
  const { open, setOpen } = useThreadsDrawer();
  return (
    <button
      type="button"
      aria-label="Threads"
      aria-expanded={open}
      aria-controls="thread-sidebar"
      data-threads-toggle=""
      onClick={() => setOpen(!open)}
      className={`inline-flex size-8 shrink-0 items-center justify-center rounded-lg text-zinc-700 hover:bg-zinc-100 focus-visible:outline-2 focus-visible:outline-zinc-900 md:hidden ${className}`}
    >
      <svg aria-hidden="true" viewBox="0 0 16 16" className="size-4">
        <path d="M2 4h12M2 8h12M2 12h12" stroke="currentColor" strokeWidth="1.6" strokeLinecap="round" />
      </svg>
    </button>
  );
}
