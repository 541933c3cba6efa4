ALTER TABLE "subagent_batches" ADD COLUMN "review_when" text;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "review_rate" double precision;