-- Message ids are unique per thread, not across threads: clients choose them.
ALTER TABLE "messages" DROP CONSTRAINT "messages_pkey";--> statement-breakpoint
ALTER TABLE "messages" ADD CONSTRAINT "messages_thread_id_id_pk" PRIMARY KEY("thread_id","id");
