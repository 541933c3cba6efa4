-- Workspace bytes are stored out of line and uncompressed, so substring() of a slice reads only
-- the TOAST chunks it needs: downloads and read_file(offset) stream without loading the file.
ALTER TABLE "workspace_files" ALTER COLUMN "bytes" SET STORAGE EXTERNAL;
