ALTER TABLE "agent_runs" ADD COLUMN "tool_calls" jsonb;--> statement-breakpoint
ALTER TABLE "agent_runs" ADD COLUMN "tool_call_count" integer DEFAULT 0 NOT NULL;