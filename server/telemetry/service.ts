/** The process names traces carry (service.name); its own module so index.ts and sdk.ts share it without a cycle. */
export type ServiceName = "flotilla-web" | "flotilla-worker";
