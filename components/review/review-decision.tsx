"use client";

import { useEffect, useId, useRef, useState } from "react";
import type { ReviewEntry } from "@/lib/api/review-queue";
import { REVIEW_NOTE_MAX_CHARS } from "@/lib/api/reviews";
import { ApiError } from "@/lib/api/client";
import { draftText, parseDraft } from "@/lib/value-draft";
import { errorMessage } from "@/components/batches/shared";
import { ErrorText } from "@/components/batches/ui";
import { Button } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import { useValueDraft, ValueEditor } from "@/components/ui/value-editor";
import { decideReview } from "./api";

type Decision = "accept" | "reject";

/** A key pressed while typing in a field is the field's, never a shortcut. */
const typingIn = (target: EventTarget | null) =>
  target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));

/**
 * Accept or Reject one queued item, with a note and, when the model got it wrong, a corrected
 * output (JSON for a batch with an output schema, else text). Keys: a, r, j / k, e; Escape leaves a
 * field and Ctrl/Cmd+Enter accepts from anywhere. A 400
 * (the correction does not fit the schema: the message names the path) shows beside the editor
 * and decides nothing; a 409 means someone decided first, and the queue moves on.
 */
export function ReviewDecision({
  entry,
  onDecided,
  onMove,
  hasPrevious,
  hasNext,
}: {
  entry: ReviewEntry;
  onDecided: (entry: ReviewEntry, message: string) => void;
  onMove: (delta: number) => void;
  hasPrevious: boolean;
  hasNext: boolean;
}) {
  const typed = entry.output_schema !== null;
  const modelText = draftText(entry.output, typed);
  const [note, setNote] = useState("");
  const [editing, setEditing] = useState(false);
  const output = useValueDraft(() => (entry.reviewed_output === undefined ? modelText : draftText(entry.reviewed_output, typed)));
  const { value: draft, setError: setOutputError } = output;
  const [formError, setFormError] = useState<string | null>(null);
  const [busy, setBusy] = useState<Decision | null>(null);
  const editor = useRef<HTMLTextAreaElement>(null);
  const noteId = useId();
  const outputId = useId();

  useEffect(() => {
    if (editing) editor.current?.focus();
  }, [editing]);

  function edit() {
    if (editing) editor.current?.focus();
    else setEditing(true);
  }

  async function decide(decision: Decision) {
    if (busy) return;
    let output: unknown;
    // Left as the model wrote it, the model's answer stands: nothing is corrected. An earlier
    // correction stands too unless the person opens the editor and puts the model's answer back.
    if (editing ? draft !== modelText : entry.reviewed_output !== undefined) {
      const parsed = parseDraft(draft, typed, "output");
      if ("error" in parsed) {
        setOutputError(parsed.error);
        return;
      }
      output = parsed.value;
    }
    setBusy(decision);
    setOutputError(null);
    setFormError(null);
    try {
      await decideReview(entry, { decision, ...(note.trim() ? { note: note.trim() } : {}), ...(output === undefined ? {} : { output }) });
      onDecided(entry, `${decision === "accept" ? "Accepted" : "Rejected"} ${entry.item_key}${output === undefined ? "" : " with a corrected output"}.`);
    } catch (err) {
      setBusy(null);
      if (err instanceof ApiError && err.status === 409)
        onDecided(entry, `Someone decided ${entry.item_key} before you did, so your decision was not saved. Moved on to the next item.`);
      else if (err instanceof ApiError && err.status === 404) onDecided(entry, `${entry.item_key} is no longer there (its batch was deleted). Moved on.`);
      else if (err instanceof ApiError && err.message.startsWith("output")) {
        setEditing(true);
        setOutputError(err.message);
      } else setFormError(errorMessage(err));
    }
  }

  useEffect(() => {
    function onKey(e: KeyboardEvent) {
      // A dialog over the queue (Save reviewed as golden set…) has the keys to itself.
      if (e.target instanceof Element && e.target.closest("dialog")) return;
      // Ctrl/Cmd+Enter accepts from anywhere, the editor included (with its correction).
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !e.altKey) {
        e.preventDefault();
        void decide("accept");
        return;
      }
      // Escape leaves a field, so the next key is a shortcut again.
      if (e.key === "Escape" && typingIn(e.target)) {
        e.preventDefault();
        (e.target as HTMLElement).blur();
        return;
      }
      if (e.ctrlKey || e.metaKey || e.altKey || typingIn(e.target)) return;
      const keys: Record<string, (() => void) | undefined> = {
        a: () => void decide("accept"),
        r: () => void decide("reject"),
        j: () => onMove(1),
        k: () => onMove(-1),
        e: edit,
      };
      const act = keys[e.key];
      if (!act) return;
      e.preventDefault();
      act();
    }
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  });

  return (
    <section aria-label="Decision" className="min-w-0 space-y-3 rounded-lg border border-zinc-200 bg-white p-4 lg:sticky lg:top-0">
      <div className="space-y-1">
        <label htmlFor={noteId} className="block text-sm font-medium text-zinc-700">
          Note
        </label>
        <textarea
          id={noteId}
          value={note}
          rows={3}
          maxLength={REVIEW_NOTE_MAX_CHARS}
          placeholder="Why (optional)"
          onChange={(e) => setNote(e.target.value)}
          className="block w-full resize-y rounded-lg border border-zinc-300 bg-white px-3 py-2 text-sm text-zinc-900 focus:border-zinc-500 focus:ring-2 focus:ring-zinc-200 focus:outline-none"
        />
      </div>
      {editing ? (
        <ValueEditor
          id={outputId}
          ref={editor}
          label="Corrected output"
          hint={
            typed
              ? "JSON, checked against the batch's output schema when you decide. Left as it is, the model's answer stands."
              : "The answer's text. Left as it is, the model's answer stands."
          }
          value={draft}
          onChange={output.onChange}
          error={output.error}
          json={typed}
        />
      ) : (
        <Button variant="secondary" size="sm" aria-keyshortcuts="e" onClick={edit}>
          Edit output <Key>e</Key>
        </Button>
      )}
      {formError ? <ErrorText error={formError} className="wrap-anywhere" /> : null}
      {/* On a phone the decision sits under a long item: Accept and Reject stay on screen in a bar. */}
      <div
        data-testid="review-decide-bar"
        className="flex flex-wrap gap-2 max-lg:fixed max-lg:inset-x-0 max-lg:bottom-0 max-lg:z-20 max-lg:border-t max-lg:border-zinc-200 max-lg:bg-white max-lg:px-4 max-lg:py-3 max-lg:shadow-[0_-2px_6px_rgba(0,0,0,0.06)]"
      >
        <Button aria-keyshortcuts="a Control+Enter Meta+Enter" disabled={busy !== null} onClick={() => void decide("accept")}>
          {busy === "accept" ? <Spinner className="size-3.5" /> : null}
          Accept <Key>a</Key>
        </Button>
        <Button variant="danger" aria-keyshortcuts="r" disabled={busy !== null} onClick={() => void decide("reject")}>
          {busy === "reject" ? <Spinner className="size-3.5" /> : null}
          Reject <Key>r</Key>
        </Button>
      </div>
      <div className="flex items-center justify-between gap-2 border-t border-zinc-100 pt-3">
        <Button variant="ghost" size="sm" aria-keyshortcuts="k" disabled={!hasPrevious} onClick={() => onMove(-1)}>
          ← Previous <Key>k</Key>
        </Button>
        <Button variant="ghost" size="sm" aria-keyshortcuts="j" disabled={!hasNext} onClick={() => onMove(1)}>
          Next <Key>j</Key> →
        </Button>
      </div>
      <p className="text-xs text-zinc-500">
        Keys work outside the fields: a accept, r reject, j / k next / previous, e edit the output. Escape leaves a field;
        Ctrl+Enter (⌘+Enter) accepts from anywhere, with the correction.
      </p>
    </section>
  );
}

/** A shortcut's key on its button, for the eye only (aria-keyshortcuts says it to assistive technology). */
function Key({ children }: { children: string }) {
  return (
    <kbd aria-hidden className="rounded border border-current/30 px-1 font-mono text-[10px] leading-4 opacity-70">
      {children}
    </kbd>
  );
}
