import http from "node:http";
import https from "node:https";
import { Readability } from "@mozilla/readability";
import { tool } from "ai";
import { parseHTML } from "linkedom";
import TurndownService from "turndown";
import { z } from "zod";
import { type Address, destinationOf, pinnedTo, type Resolve, urlHost } from "@/server/net/addresses";
import type { ToolGroup } from "./types";

/**
 * `web`: fetch_url(url). GET only; every hop (redirects are followed by hand) is resolved,
 * checked against the refused ranges, and then connected to the checked address itself, so a
 * DNS answer that changes between check and connect (rebinding) cannot reach inside.
 */

export const WEB_MAX_REDIRECTS = 5;
/** Bytes read from a response body; the rest is dropped (the page is marked truncated). */
export const WEB_MAX_BYTES = 5 * 1024 * 1024;

export class FetchRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FetchRefusedError";
  }
}

export interface FetchUrlOptions {
  allowHosts: readonly string[];
  signal: AbortSignal;
  maxBytes?: number;
  /** Resolves a host name to its addresses (tests pass their own to simulate a DNS answer). */
  resolve?: Resolve;
}

export interface FetchedPage {
  url: string;
  status: number;
  contentType: string;
  title: string | null;
  text: string;
  truncated: boolean;
}

async function checkedAddress(url: URL, opts: FetchUrlOptions): Promise<Address> {
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new FetchRefusedError(`only http and https URLs can be fetched (got ${url.protocol})`);
  if (url.username || url.password) throw new FetchRefusedError("URLs with credentials are refused");
  const { address, refused } = await destinationOf(url, opts.allowHosts, opts.resolve);
  if (refused)
    throw new FetchRefusedError(
      `refused: ${urlHost(url)} resolves to ${refused.address}, a loopback, private or reserved address ` +
        "(add the host or host:port to tools.web_allow_hosts to allow it)",
    );
  return address;
}

interface RawResponse {
  status: number;
  location: string | undefined;
  contentType: string;
  body: Buffer;
  truncated: boolean;
}

function requestOnce(url: URL, address: Address, opts: FetchUrlOptions): Promise<RawResponse> {
  const maxBytes = opts.maxBytes ?? WEB_MAX_BYTES;
  const client = url.protocol === "https:" ? https : http;
  return new Promise((resolve, reject) => {
    const req = client.request(
      url,
      {
        method: "GET",
        // Connect to the address that was checked, whatever DNS says now.
        ...pinnedTo(url, address),
        signal: opts.signal,
        headers: {
          "user-agent": "Flotilla-fetch_url/1.0",
          accept: "text/html,application/xhtml+xml,text/plain,application/json;q=0.9,*/*;q=0.5",
          "accept-encoding": "identity",
        },
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const location = typeof res.headers.location === "string" ? res.headers.location : undefined;
        const contentType = String(res.headers["content-type"] ?? "");
        if (status >= 300 && status < 400 && location) {
          res.resume();
          resolve({ status, location, contentType, body: Buffer.alloc(0), truncated: false });
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        let truncated = false;
        res.on("data", (chunk: Buffer) => {
          if (truncated) return;
          const room = maxBytes - size;
          if (chunk.length > room) {
            chunks.push(chunk.subarray(0, room));
            size = maxBytes;
            truncated = true;
            // Stop downloading what we will not read.
            res.destroy();
            resolve({ status, location, contentType, body: Buffer.concat(chunks), truncated });
            return;
          }
          chunks.push(chunk);
          size += chunk.length;
        });
        res.on("end", () => resolve({ status, location, contentType, body: Buffer.concat(chunks), truncated }));
        res.on("error", (err) => {
          if (!truncated) reject(err);
        });
      },
    );
    req.on("error", reject);
    req.end();
  });
}

const turndown = new TurndownService({ headingStyle: "atx", codeBlockStyle: "fenced", bulletListMarker: "-" });
turndown.remove(["script", "style", "noscript", "template", "iframe", "object", "embed"]);

/** HTML → readable markdown: Readability's article when it finds one, else the whole body. */
export function htmlToMarkdown(html: string): { title: string | null; markdown: string } {
  const { document } = parseHTML(html);
  for (const el of document.querySelectorAll("script, style, noscript, template, iframe, object, embed"))
    el.remove();
  const fallbackTitle = document.querySelector("title")?.textContent?.trim() || null;
  const bodyHtml = document.body?.innerHTML ?? html;
  let title = fallbackTitle;
  let content = bodyHtml;
  try {
    // Readability mutates the document it is given, so it reads a clone.
    const article = new Readability(document.cloneNode(true) as unknown as Document, { charThreshold: 100 }).parse();
    if (article?.content) {
      content = article.content;
      title = article.title?.trim() || fallbackTitle;
    }
  } catch {
    // A page Readability cannot read is converted whole.
  }
  const markdown = turndown
    .turndown(content)
    .replace(/\n{3,}/g, "\n\n")
    .trim();
  return { title, markdown };
}

/** GET `raw` with the SSRF checks on every hop; HTML comes back as markdown, text as it is. */
export async function fetchUrl(raw: string, opts: FetchUrlOptions): Promise<FetchedPage> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new FetchRefusedError(`not a valid URL: ${raw}`);
  }
  for (let hop = 0; ; hop++) {
    const address = await checkedAddress(url, opts);
    const res = await requestOnce(url, address, opts);
    if (res.status >= 300 && res.status < 400 && res.location) {
      if (hop >= WEB_MAX_REDIRECTS) throw new Error(`more than ${WEB_MAX_REDIRECTS} redirects`);
      url = new URL(res.location, url);
      continue;
    }
    const type = res.contentType.split(";")[0].trim().toLowerCase();
    const body = res.body.toString("utf8");
    if (res.status >= 400) throw new Error(`HTTP ${res.status} from ${url.href}`);
    if (type === "text/html" || type === "application/xhtml+xml") {
      const { title, markdown } = htmlToMarkdown(body);
      return { url: url.href, status: res.status, contentType: type, title, text: markdown, truncated: res.truncated };
    }
    if (type === "" || type.startsWith("text/") || /[/+](json|xml)$/.test(type))
      return { url: url.href, status: res.status, contentType: type || "text/plain", title: null, text: body, truncated: res.truncated };
    throw new Error(`unsupported content type ${type} (fetch_url reads text, HTML, JSON and XML)`);
  }
}

/** The page as the model reads it. */
export function formatPage(page: FetchedPage): string {
  const head = [page.title ? `# ${page.title}` : null, `Source: ${page.url}`].filter(Boolean).join("\n");
  return `${head}\n\n${page.text}${page.truncated ? `\n\n[truncated at ${WEB_MAX_BYTES} bytes]` : ""}`;
}

export const webGroup: ToolGroup = {
  name: "web",
  description: "fetch_url: GET a web page (HTML as readable markdown) or a text document.",
  build: (ctx) => ({
    fetch_url: tool({
      description:
        "Fetch a public http(s) URL with GET and return its readable text (HTML converted to markdown; " +
        "scripts and styles dropped). Private and loopback addresses are refused.",
      inputSchema: z.object({ url: z.string().min(1).max(4_000).describe("The absolute http(s) URL") }),
      execute: async ({ url }, { abortSignal }) =>
        formatPage(
          await fetchUrl(url, { allowHosts: ctx.config.tools.web_allow_hosts, signal: abortSignal ?? ctx.signal }),
        ),
    }),
  }),
};
