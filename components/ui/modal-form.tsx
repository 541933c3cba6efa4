"use client";

import { type ReactNode, useEffect, useId, useRef } from "react";
import { buttonClasses } from "./button";

/** A `<dialog>` shown as a modal once mounted and closed on unmount (its onClose then tells the caller). */
export function useModal() {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d?.close();
  }, []);
  return ref;
}

const WIDTHS = { md: "w-[min(32rem,calc(100vw-2rem))]", lg: "w-[min(40rem,calc(100vw-2rem))]" } as const;

/**
 * A modal form (New batch, Save as golden set): its title with a Close button, then the fields;
 * scrolls inside the viewport when taller. Enter or a submit button calls `onSubmit`; Close and
 * Escape close it, which calls `onClose`.
 */
export function ModalForm({
  title,
  width,
  onClose,
  onSubmit,
  children,
  ...data
}: {
  title: ReactNode;
  width: keyof typeof WIDTHS;
  onClose: () => void;
  onSubmit: () => void;
  children: ReactNode;
  /** data-* attributes of the dialog (its test id, what it is about). */
  [data: `data-${string}`]: string | undefined;
}) {
  const ref = useModal();
  const titleId = useId();
  return (
    <dialog
      ref={ref}
      aria-labelledby={titleId}
      onClose={onClose}
      {...data}
      className={`m-auto max-h-[calc(100dvh-2rem)] ${WIDTHS[width]} overflow-y-auto rounded-lg bg-white p-0 text-sm text-zinc-900 shadow-xl backdrop:bg-zinc-900/40`}
    >
      <form
        method="dialog"
        className="flex flex-col gap-3 p-4"
        onSubmit={(e) => {
          e.preventDefault();
          onSubmit();
        }}
      >
        <div className="flex items-center gap-2">
          <h3 id={titleId} className="text-base font-semibold">
            {title}
          </h3>
          <button type="button" onClick={() => ref.current?.close()} className={buttonClasses("secondary", "sm", "ml-auto")}>
            Close
          </button>
        </div>
        {children}
      </form>
    </dialog>
  );
}
