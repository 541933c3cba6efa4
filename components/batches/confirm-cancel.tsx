"use client";

import { type ReactNode, useId } from "react";
import { formatCount } from "@/lib/format";
import { useLiveBatch } from "./panel-state";
import { isActiveBatch } from "./status";
import { buttonClasses } from "@/components/ui/button";
import { useModal } from "@/components/ui/modal-form";

/**
 * Asks before a batch action that cannot be taken back (Cancel, the bulk retries): a modal
 * question whose safe choice has the focus; Escape or the safe button closes it.
 */
export function ConfirmDialog({
  title,
  children,
  testId,
  keepLabel,
  confirmLabel,
  danger = false,
  disabled,
  onConfirm,
  onClose,
}: {
  title: string;
  /** What the action does, in numbers that follow the panel's polls. */
  children: ReactNode;
  testId: string;
  keepLabel: string;
  confirmLabel: string;
  danger?: boolean;
  disabled: boolean;
  onConfirm: () => void;
  onClose: () => void;
}) {
  const ref = useModal();
  const titleId = useId();
  const descId = useId();
  return (
    <dialog
      ref={ref}
      role="alertdialog"
      aria-labelledby={titleId}
      aria-describedby={descId}
      onClose={onClose}
      className="m-auto w-[min(24rem,calc(100vw-2rem))] rounded-lg bg-white p-4 text-sm shadow-xl backdrop:bg-zinc-900/40"
    >
      <h3 id={titleId} className="text-base font-semibold">
        {title}
      </h3>
      <p id={descId} data-testid={testId} aria-live="polite" className="mt-2 text-zinc-700">
        {children}
      </p>
      <div className="mt-4 flex justify-end gap-2">
        {/* biome-ignore lint/a11y/noAutofocus: the safe choice takes focus in a confirmation */}
        <button type="button" autoFocus onClick={onClose} className={buttonClasses("secondary", "sm")}>
          {keepLabel}
        </button>
        <button
          type="button"
          disabled={disabled}
          onClick={onConfirm}
          className={buttonClasses(danger ? "dangerSolid" : "primary", "sm")}
        >
          {confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

/** What every question dialog's caller hands it: what to do on yes, and how to close. */
export type ConfirmHandlers = { onConfirm: () => void; onClose: () => void };

/** Asks before cancelling; the count follows the panel's polls while the dialog is open. */
export function ConfirmCancel({ threadId, batchId, onConfirm, onClose }: { threadId: string; batchId: string } & ConfirmHandlers) {
  const batch = useLiveBatch(threadId, batchId);
  const remaining = batch ? Math.max(0, batch.total - batch.terminal) : 0;
  const cancellable = !!batch && isActiveBatch(batch.status) && remaining > 0;
  return (
    <ConfirmDialog
      title="Cancel this batch?"
      testId="cancel-remaining"
      keepLabel="Keep running"
      confirmLabel="Confirm"
      danger
      disabled={!cancellable}
      onConfirm={onConfirm}
      onClose={onClose}
    >
      {!cancellable
        ? "This batch has already finished: there is nothing left to cancel."
        : `${remaining === 1 ? "The 1 unfinished item" : `All ${formatCount(remaining)} unfinished items`} will be cancelled and running ones stopped. Finished results stay available for download.`}
    </ConfirmDialog>
  );
}
