CREATE TABLE "subagent_batch_check_counts" (
	"batch_id" uuid NOT NULL,
	"name" text NOT NULL,
	"passed" integer DEFAULT 0 NOT NULL,
	"failed" integer DEFAULT 0 NOT NULL,
	CONSTRAINT "subagent_batch_check_counts_batch_id_name_pk" PRIMARY KEY("batch_id","name")
);
--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "output" jsonb;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "expected" jsonb;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "checks" jsonb;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "verdict" text;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "verdict_passed_count" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "verdict_failed_count" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batch_check_counts" ADD CONSTRAINT "subagent_batch_check_counts_batch_id_subagent_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."subagent_batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "subagent_batch_items_verdict_failed_idx" ON "subagent_batch_items" USING btree ("batch_id","position") WHERE verdict = 'failed';