import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { Markdown, safeUrl } from "@/components/chat/markdown";

const render = (text: string, streaming = false) => renderToStaticMarkup(createElement(Markdown, { text, streaming }));

const REPLY = [
  "## Findings",
  "",
  "- first point",
  "- second point",
  "",
  "| city | population |",
  "| --- | --- |",
  "| Lisbon | 545k |",
  "",
  "```ts",
  "const answer = 42;",
  "```",
  "",
  "See [the docs](https://example.com/docs) and [this](javascript:alert(1)).",
  "",
  '<img src=x onerror="alert(1)"><script>alert(2)</script><b>bold html</b>',
].join("\n");

describe("the reply renderer", () => {
  it("renders headings, lists, tables and code blocks with a copy control", () => {
    const html = render(REPLY);
    expect(html).toMatch(/<h2[^>]*>Findings<\/h2>/);
    expect(html.match(/<li[^>]*>/g)?.length).toBe(2);
    expect(html).toMatch(/<table[^>]*>/);
    expect(html).toMatch(/<td[^>]*>Lisbon<\/td>/);
    expect(html).toContain("const answer = 42;");
    expect(html).toMatch(/data-streamdown="code-block"/);
    expect(html).toMatch(/title="Copy Code"|aria-label="Copy/i);
  });

  it("keeps web links, blocks javascript: links and shows raw HTML as text", () => {
    const html = render(REPLY);
    expect(html).toContain('href="https://example.com/docs"');
    expect(html).not.toMatch(/javascript:/i);
    // Raw HTML stays visible text, never elements.
    expect(html).not.toMatch(/<script|<img|<b>/i);
    expect(html).toContain("&lt;script&gt;alert(2)&lt;/script&gt;");
  });

  it("renders an unfinished stream without throwing (open fence, half a table)", () => {
    const html = render("# Title\n\n| a | b |\n| --- |\n\n```py\nprint(1", true);
    expect(html).toMatch(/<h1[^>]*>Title<\/h1>/);
  });

  it.each([
    ["https://a.example/x", "https://a.example/x"],
    ["mailto:x@example.com", "mailto:x@example.com"],
    ["/threads/1", "/threads/1"],
    ["#batch-1", "#batch-1"],
    ["javascript:alert(1)", null],
    [" JavaScript:alert(1)", null],
    ["data:text/html,<script>", null],
    ["vbscript:x", null],
    ["//evil.example/x", null],
  ])("safeUrl(%s)", (url, expected) => {
    expect(safeUrl(url)).toBe(expected);
  });
});
