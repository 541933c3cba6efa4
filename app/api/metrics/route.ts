import { requireUser } from "@/server/auth/authenticate";
import { getDatabase } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { handle } from "@/server/http/route";
import { checkMetricsToken, configureMetrics, metricsTokenConfigured, renderMetrics } from "@/server/metrics";

export const dynamic = "force-dynamic";

/**
 * Prometheus text exposition of this web process. Scrapers authenticate with
 * `Authorization: Bearer $FLOTILLA_METRICS_TOKEN` when that variable is set (then only that token
 * is accepted); otherwise any signed-in user or personal API token may read it.
 */
export const GET = handle(async (req: Request) => {
  if (metricsTokenConfigured()) {
    if (!checkMetricsToken(req.headers.get("authorization"))) throw new AppError("unauthorized", "metrics token required");
  } else {
    await requireUser(req);
  }
  configureMetrics({ role: "web", db: getDatabase().db });
  const { contentType, body } = await renderMetrics();
  return new Response(body, { status: 200, headers: { "content-type": contentType, "cache-control": "no-store" } });
});
