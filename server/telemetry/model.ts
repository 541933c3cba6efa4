import type { LanguageModelV3StreamPart, LanguageModelV3Usage } from "@ai-sdk/provider";
import type { LanguageModelMiddleware } from "ai";
import { failSpan, inSpan, startSpan, withSpan } from "./index";

/**
 * `chat <model>` spans (GenAI conventions) around every model call: the request model, the usage
 * the provider reported, the finish reason. Spans are no-ops while tracing is off.
 */

function usageAttributes(usage: LanguageModelV3Usage | undefined) {
  return {
    "gen_ai.usage.input_tokens": usage?.inputTokens.total ?? 0,
    "gen_ai.usage.output_tokens": usage?.outputTokens.total ?? 0,
  };
}

export function chatSpanMiddleware(model: string): LanguageModelMiddleware {
  const attrs = { "gen_ai.operation.name": "chat", "gen_ai.request.model": model };
  const name = `chat ${model}`;
  return {
    specificationVersion: "v3",
    wrapGenerate: ({ doGenerate }) =>
      withSpan(name, attrs, async (span) => {
        const result = await doGenerate();
        span.setAttributes({ ...usageAttributes(result.usage), "gen_ai.response.finish_reasons": [result.finishReason.unified] });
        return result;
      }),
    wrapStream: async ({ doStream, params }) => {
      const span = startSpan(name, attrs);
      let result: Awaited<ReturnType<typeof doStream>>;
      try {
        result = await inSpan(span, doStream);
      } catch (err) {
        failSpan(span, err);
        span.end();
        throw err;
      }
      let ended = false;
      const end = (err?: unknown) => {
        if (ended) return;
        ended = true;
        if (err !== undefined) failSpan(span, err);
        span.end();
      };
      const watch = new TransformStream<LanguageModelV3StreamPart, LanguageModelV3StreamPart>({
        transform(part, controller) {
          if (part.type === "finish")
            span.setAttributes({ ...usageAttributes(part.usage), "gen_ai.response.finish_reasons": [part.finishReason.unified] });
          else if (part.type === "error") failSpan(span, part.error);
          controller.enqueue(part);
        },
        flush: () => end(),
      });
      // A reader that stops (Stop, a closed response) never flushes: the call's abort ends the span.
      params.abortSignal?.addEventListener("abort", () => end(params.abortSignal?.reason ?? "aborted"), { once: true });
      return { ...result, stream: result.stream.pipeThrough(watch) };
    },
  };
}
