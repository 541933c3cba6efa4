"use client";

import { type ReactNode, useRef, useState } from "react";
import { Button } from "@/components/ui/button";

/** Copies text; plain-http pages on a LAN host have no Clipboard API, so a selected input is copied the old way. */
async function copyText(text: string, input: HTMLInputElement | null): Promise<boolean> {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // fall through to the selection
  }
  if (!input) return false;
  input.select();
  return document.execCommand("copy");
}

/**
 * A secret the server shows once (an API token, an invite code, a webhook signing secret):
 * the value in a read-only box that selects itself, a Copy button that says when it copied,
 * and a reminder that it will not be shown again.
 */
export function OnceSecret({
  label,
  value,
  title,
  className = "mt-3",
  children,
}: {
  label: string;
  value: string;
  title: string;
  className?: string;
  children?: ReactNode;
}) {
  const input = useRef<HTMLInputElement>(null);
  const [copied, setCopied] = useState<"yes" | "no" | null>(null);
  return (
    <div role="status" data-testid="once-secret" className={`${className} rounded-lg border border-emerald-200 bg-emerald-50 p-3 text-sm`}>
      <p className="font-medium text-emerald-900">{title}</p>
      <div className="mt-2 flex items-center gap-2">
        <input
          ref={input}
          aria-label={label}
          readOnly
          value={value}
          onFocus={(e) => e.currentTarget.select()}
          className="block min-w-0 flex-1 rounded border border-zinc-200 bg-white px-2 py-1 font-mono text-xs text-zinc-900"
        />
        <Button
          variant="secondary"
          size="sm"
          onClick={async () => setCopied((await copyText(value, input.current)) ? "yes" : "no")}
        >
          {copied === "yes" ? "Copied" : "Copy"}
        </Button>
      </div>
      {copied === "no" ? <p className="mt-1 text-xs text-emerald-900">Copying was blocked: select the text and copy it yourself.</p> : null}
      {children}
    </div>
  );
}
