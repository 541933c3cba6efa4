import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { ToolCallList } from "@/components/tool-calls";

/** The tool-call list the task card, swarm rows and item detail share. */

describe("ToolCallList", () => {
  it("shows each call's tool, status, duration and bounded previews, in order", () => {
    const html = renderToStaticMarkup(
      createElement(ToolCallList, {
        calls: [
          { id: "c1", name: "fs__read_text_file", args_preview: '{"path":"a.md"}', result_preview: "# A", status: "ok", duration_ms: 42 },
          { id: "c2", name: "fetch_url", args_preview: '{"url":"http://10.0.0.1/"}', result_preview: "refused: 10.0.0.1", status: "error", duration_ms: 2_500 },
        ],
      }),
    );
    expect(html.indexOf("fs__read_text_file")).toBeLessThan(html.indexOf("fetch_url"));
    expect(html).toContain('data-tool="fs__read_text_file" data-status="ok"');
    expect(html).toContain('data-tool="fetch_url" data-status="error"');
    expect(html).toContain("42 ms");
    expect(html).toContain("2.5 s");
    expect(html).toContain("{&quot;path&quot;:&quot;a.md&quot;}");
    expect(html).toContain(">Error<");
    expect(html).toContain("refused: 10.0.0.1");
  });
});
