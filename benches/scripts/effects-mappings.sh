# Sourced by the bench scripts of the side effects (issue 39): the mappings they measure, each
# made in a folder under $BENCH_DIR for a backend (sqlite or postgres) and its path printed.
#
#   minimal BACKEND   one statement per INVOIC, the document number read with one JSON path
#   invoice BACKEND   the mapping the issue describes: the example's invoice statement and a
#                     statement counting the calls, without the example's line rows
minimal() { # backend -> a folder with the minimal mapping
  local dir="$BENCH_DIR/effects-minimal-$1"
  rm -rf "$dir"; mkdir -p "$dir/migrations"
  echo "CREATE TABLE invoices_min (sender TEXT, invoice_no TEXT, message_id BIGINT);" \
    >"$dir/migrations/0001_invoices_min.sql"
  echo "INSERT INTO invoices_min VALUES (:sender, :message -> 1 -> 2 ->> 0, :message_id);" \
    >"$dir/INVOIC.sql"
  echo "$dir"
}
invoice() { # backend -> a folder with the example's invoice statement and a count of the calls
  local dir="$BENCH_DIR/effects-invoice-$1"
  rm -rf "$dir"; mkdir -p "$dir/migrations"
  cp "examples/effects/$1/migrations/"* "$dir/migrations/"
  echo "CREATE TABLE effect_calls (calls BIGINT NOT NULL); INSERT INTO effect_calls VALUES (0);" \
    >"$dir/migrations/0002_effect_calls.sql"
  awk '/^-- Its lines/ {exit} {print}' "examples/effects/$1/INVOIC.sql" >"$dir/INVOIC.sql"
  echo "UPDATE effect_calls SET calls = calls + 1;" >>"$dir/INVOIC.sql"
  echo "$dir"
}
