"use client";

import { code } from "@streamdown/code";
import { defaultRehypePlugins, Streamdown } from "streamdown";

/** Links may only go to the web, mail or this app: never `javascript:`, `data:` or `vbscript:`. */
export function safeUrl(url: string): string | null {
  const value = url.trim();
  if (/^(https?:|mailto:)/i.test(value)) return value;
  // Relative links and anchors (no scheme at all).
  if (/^[/#?]/.test(value) && !value.startsWith("//")) return value;
  return null;
}

const plugins = { code };
// Streamdown's defaults without `raw`: HTML in a reply stays text, it is never parsed into elements.
const rehypePlugins = [defaultRehypePlugins.sanitize, defaultRehypePlugins.harden];

/**
 * A reply as markdown, made for streamed text (unfinished fences and tables do not flicker):
 * GFM tables, highlighted code blocks with a copy button, safe links; raw HTML is dropped,
 * never rendered.
 */
export function Markdown({ text, streaming }: { text: string; streaming: boolean }) {
  return (
    <Streamdown
      className="markdown space-y-3 break-words leading-relaxed"
      mode={streaming ? "streaming" : "static"}
      isAnimating={streaming}
      plugins={plugins}
      skipHtml
      rehypePlugins={rehypePlugins}
      urlTransform={(url) => safeUrl(url) ?? ""}
      linkSafety={{ enabled: false }}
      controls={{ code: true, table: true, mermaid: false }}
    >
      {text}
    </Streamdown>
  );
}
