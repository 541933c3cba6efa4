"use client";

import type { ReactNode, RefObject } from "react";
import { Button } from "@/components/ui/button";
import { CHAT_MAX_TEXT_CHARS, tooLongMessage } from "@/lib/api/chat";

/**
 * The message box at the bottom of a thread: Enter sends, Shift+Enter starts a new line; while
 * a reply runs there is Stop (that reply only), and Send becomes Queue: the message is answered
 * after it. Too long a text is refused here, with the reason.
 */
export function Composer({
  input,
  onInput,
  notice,
  busy,
  onSend,
  onStop,
  textarea,
  attachButton,
  attachStatus,
}: {
  input: string;
  onInput: (text: string) => void;
  /** Why the last send was refused (cleared by typing). */
  notice: string | null;
  busy: boolean;
  onSend: () => void;
  onStop: () => void;
  textarea: RefObject<HTMLTextAreaElement | null>;
  attachButton: ReactNode;
  attachStatus: ReactNode;
}) {
  const tooLong = input.length > CHAT_MAX_TEXT_CHARS;
  return (
    <form
      data-testid="composer"
      className="shrink-0 border-t border-zinc-200 bg-white/80 px-4 py-3 backdrop-blur"
      onSubmit={(e) => {
        e.preventDefault();
        onSend();
      }}
    >
      {attachStatus}
      <div className="mx-auto w-full max-w-3xl">
        {(notice || tooLong) && (
          <p role="alert" data-testid="composer-notice" className="mb-2 text-sm text-red-700">
            {notice ?? tooLongMessage(input.length)}
          </p>
        )}
        <div className="flex items-end gap-2">
          {attachButton}
          <textarea
            ref={textarea}
            id="message"
            aria-label="Message"
            aria-invalid={tooLong || undefined}
            value={input}
            onChange={(e) => onInput(e.target.value)}
            onKeyDown={(e) => {
              if (e.key === "Enter" && !e.shiftKey && !e.nativeEvent.isComposing) {
                e.preventDefault();
                onSend();
              }
            }}
            rows={Math.min(8, Math.max(1, input.split("\n").length))}
            placeholder={busy ? "Queue a message…" : "Message the lead agent…"}
            title="Enter sends, Shift+Enter starts a new line"
            className="max-h-60 min-h-10 min-w-0 flex-1 resize-none rounded-xl border border-zinc-300 bg-white px-3 py-2 text-[15px] shadow-xs placeholder:text-zinc-400 focus:border-zinc-500 focus:ring-2 focus:ring-zinc-200 focus:outline-none"
          />
          {busy ? (
            <>
              {/* Beside Queue on a phone, Stop is its square alone (its name stays "Stop"). */}
              <Button variant="secondary" onClick={onStop} title="Stop the current reply" className="max-sm:w-10 max-sm:px-0">
                <span aria-hidden="true" className="inline-block size-2.5 rounded-[2px] bg-zinc-700" />
                <span className="max-sm:sr-only">Stop</span>
              </Button>
              <Button type="submit" disabled={!input.trim() || tooLong} title="The lead agent answers it after the current reply">
                Queue
              </Button>
            </>
          ) : (
            <Button type="submit" disabled={!input.trim() || tooLong}>
              Send
            </Button>
          )}
        </div>
      </div>
    </form>
  );
}
