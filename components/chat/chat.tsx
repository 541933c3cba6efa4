"use client";

import { useRef, useState } from "react";
import { useAttachFiles } from "@/components/files/attach";
import { CHAT_MAX_TEXT_CHARS, THREAD_BUSY_MESSAGE, tooLongMessage } from "@/lib/api/chat";
import type { ChatMessage } from "@/lib/api/chat";
import { Composer } from "./composer";
import { EmptyState } from "./empty-state";
import { MessageList } from "./message-list";
import { useThreadChat } from "./use-thread-chat";

/** A thread's chat: the transcript above, the composer below; files dropped anywhere on it are attached. */
export function Chat({ threadId, initialMessages }: { threadId: string; initialMessages: ChatMessage[] }) {
  const [input, setInput] = useState("");
  const [notice, setNotice] = useState<string | null>(null);
  // Counts sends: the transcript jumps to the bottom to show the person's own message.
  const [sends, setSends] = useState(0);
  const textarea = useRef<HTMLTextAreaElement>(null);
  // A refused message comes back to the composer, unless something new was typed meanwhile.
  const chat = useThreadChat(threadId, initialMessages, {
    onRefused: (text) => setInput((current) => (current.trim() === "" ? text : current)),
    // Keep saying why while the other tab's response is followed here.
    onBusy: () => setNotice(THREAD_BUSY_MESSAGE),
    onQueueRefused: setNotice,
  });
  const attach = useAttachFiles(threadId);

  function send() {
    const text = input.trim();
    // While a response runs the message is queued: answered after it (use-thread-chat).
    if (!text) return;
    if (text.length > CHAT_MAX_TEXT_CHARS) {
      setNotice(tooLongMessage(text.length));
      return;
    }
    setNotice(null);
    setSends((n) => n + 1);
    chat.send(text, input);
    setInput("");
  }

  return (
    <div className="relative flex min-h-0 flex-1 flex-col" {...attach.dropTarget}>
      {attach.overlay}
      <MessageList
        threadId={threadId}
        messages={chat.messages}
        queued={chat.queued}
        streamingId={chat.streamingId}
        thinking={chat.thinking}
        error={chat.errorText === notice ? null : chat.errorText}
        follow={sends}
        empty={
          <EmptyState
            threadId={threadId}
            onPick={(text) => {
              setInput(text);
              textarea.current?.focus();
            }}
          />
        }
      />
      <Composer
        input={input}
        onInput={(text) => {
          setInput(text);
          if (notice) setNotice(null);
        }}
        notice={notice}
        busy={chat.busy}
        onSend={send}
        onStop={() => void chat.stop()}
        textarea={textarea}
        attachButton={attach.button}
        attachStatus={attach.status}
      />
    </div>
  );
}
