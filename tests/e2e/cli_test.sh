#!/usr/bin/env bash
# End-to-end tests of the `saturate` CLI, run the way a new user runs it.
#
# usage: cli_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR
#
# Makes its own inputs in a scratch directory (a small JPEG ImageFolder set
# from scripts/make-photo-dataset, CSV/JSONL tables, the Fashion-MNIST IDX
# files in /usr/share/datasets/fashion-mnist) and checks exit codes, messages
# and the datasets left on disk. The last line is "N passed, M failed"; the
# exit status is non-zero when anything failed.
set -u

SAT=${1:?usage: cli_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR}
SRC=${2:?usage: cli_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR}
FMNIST=${SATURATE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
SAT=$(cd "$(dirname "$SAT")" && pwd)/$(basename "$SAT")
SRC=$(cd "$SRC" && pwd)
[[ -x $SAT ]] || { echo "cli_test: $SAT is not an executable" >&2; exit 2; }

source "$SRC/tests/e2e/lib.sh"

# ---- inputs -------------------------------------------------------------------
section "making inputs"
if ! python3 "$SRC/scripts/make-photo-dataset" photos --train 40 --val 0 --seed 7 -j 2 \
    >"$WORK/mkphotos.log" 2>&1; then
  echo "cli_test: scripts/make-photo-dataset failed (needs python3 with Pillow and" \
       "Debian's plasma-workspace-wallpapers in /usr/share/wallpapers):" >&2
  cat "$WORK/mkphotos.log" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
PHOTOS=$WORK/photos/train
NPHOTOS=$(find "$PHOTOS" -type f -name '*.jpg' | wc -l)
if [[ $NPHOTOS -ne 40 ]]; then
  echo "cli_test: expected 40 photos, make-photo-dataset wrote $NPHOTOS" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
mapfile -t CLASSES < <(find "$PHOTOS" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | LC_ALL=C sort)
HAVE_FMNIST=1
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [[ -f $FMNIST/$f ]] || HAVE_FMNIST=0
done
if [[ $HAVE_FMNIST -eq 0 ]]; then
  echo "cli_test: Fashion-MNIST IDX files missing from $FMNIST" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

# ---- help and usage -------------------------------------------------------------
section "help and usage"
sat --help
expect_rc 0 "saturate --help"
for w in pack verify inspect; do expect_out "$w" "saturate --help lists '$w'"; done
sat --version
expect_rc 0 "saturate --version"
expect_out "saturate 0.1.0" "saturate --version"
sat pack --help
expect_rc 0 "pack --help"
for w in folder table idx; do expect_out "$w" "pack --help lists '$w'"; done
sat pack folder --help
expect_rc 0 "pack folder --help"
for w in ROOT OUT --force --skip-bad --shard-size --json -j,--threads; do
  expect_out "$w" "pack folder --help mentions $w"
done
sat pack table --help
expect_rc 0 "pack table --help"
for w in TABLE OUT --path-column --label-column --force --json; do
  expect_out "$w" "pack table --help mentions $w"
done
sat pack idx --help
expect_rc 0 "pack idx --help"
for w in IMAGES LABELS OUT --class-names --force --json; do
  expect_out "$w" "pack idx --help mentions $w"
done
sat verify --help
expect_rc 0 "verify --help"
for w in DATASET --json --max-problems --no-mmap; do expect_out "$w" "verify --help mentions $w"; done
sat inspect --help
expect_rc 0 "inspect --help"
for w in DATASET --json --record; do expect_out "$w" "inspect --help mentions $w"; done

sat
expect_rc 2 "saturate with no subcommand"
sat --no-such-flag
expect_rc 2 "saturate --no-such-flag"
sat pack folder --no-such-flag "$PHOTOS" x
expect_rc 2 "pack folder --no-such-flag"
check "unknown flag creates nothing" test ! -e x
sat verify --bogus "$WORK"
expect_rc 2 "verify --bogus"
sat inspect --bogus "$WORK"
expect_rc 2 "inspect --bogus"
sat frobnicate
expect_rc 2 "unknown subcommand"
sat pack folder "$PHOTOS"
expect_rc 2 "pack folder with OUT missing"
sat pack folder "$PHOTOS" x --shard-size 12parsecs
expect_rc 2 "pack --shard-size with a bad unit"
expect_err "shard-size" "bad --shard-size message"
sat pack folder "$PHOTOS" x -j -1
expect_rc 2 "pack -j -1"

# ---- pack folder / verify / inspect -------------------------------------------------
section "pack folder, verify, inspect"
sat pack folder "$PHOTOS" ds -q
expect_rc 0 "pack folder"
expect_out "packed 40 records" "pack folder summary"
check "pack folder wrote ds/manifest.json" test -f ds/manifest.json
check "no ds.partial left after a pack" test ! -e ds.partial
sat verify ds
expect_rc 0 "verify ds"
expect_out "OK" "verify ds"
expect_out "40 records" "verify ds record count"
sat inspect ds
expect_rc 0 "inspect ds"
expect_out "records   40" "inspect record count"
expect_out "image: image" "inspect schema shows image field"
expect_out "label: int64" "inspect schema shows label field"
expect_out "classes   ${#CLASSES[@]}:" "inspect class count"
for c in "${CLASSES[@]}"; do expect_out " $c" "inspect lists class $c"; done
sat inspect ds -r 39
expect_rc 0 "inspect -r 39"
expect_out "record 39" "inspect -r 39"
sat inspect ds -r 40
expect_rc_nonzero "inspect -r 40 (past the end)"

sat pack "$PHOTOS" dsbare -q
expect_rc 0 "pack ROOT OUT (no subcommand) packs an ImageFolder"
expect_out "packed 40 records" "pack ROOT OUT summary"
sat pack "$WORK/no-such-dir" dsnone -q
expect_rc_nonzero "pack of a missing directory"
expect_err "no-such-dir" "the error names the missing source"

sat pack folder "$PHOTOS" dsj --json -q
expect_rc 0 "pack --json"
expect_valid_json "pack --json"
expect_json 'j["records"]' 40 "pack --json records"
expect_json 'j["skipped"]' 0 "pack --json skipped"
sat verify dsj --json
expect_rc 0 "verify --json"
expect_valid_json "verify --json"
expect_json 'j["ok"]' True "verify --json ok"
expect_json 'j["records_checked"]' 40 "verify --json records_checked"
sat inspect dsj --json
expect_rc 0 "inspect --json"
expect_valid_json "inspect --json"
expect_json 'j["records"]' 40 "inspect --json records"
expect_json 'j["schema"]' "['image: image', 'label: int64']" "inspect --json schema"
expect_json 'j["class_names"]' "$(python3 -c 'import sys; print(sys.argv[1:])' "${CLASSES[@]}")" \
  "inspect --json class_names"

# ---- existing outputs and --force -----------------------------------------------------
section "existing OUT and --force"
BEFORE=$(tree_sum ds)
sat pack folder "$PHOTOS" ds -q
expect_rc 2 "pack onto an existing dataset without --force"
expect_err "--force" "refusal mentions --force"
check "old dataset untouched" test "$(tree_sum ds)" = "$BEFORE"
sat verify ds
expect_rc 0 "old dataset still verifies"

mkdir -p two/a two/b
cp "$(find "$PHOTOS/${CLASSES[0]}" -name '*.jpg' | head -1)" two/a/
cp "$(find "$PHOTOS/${CLASSES[1]}" -name '*.jpg' | head -1)" two/b/
sat pack folder two ds --force -q
expect_rc 0 "pack --force onto a dataset"
expect_out "packed 2 records" "pack --force summary"
sat inspect ds --json
expect_json 'j["records"]' 2 "--force replaced the dataset"
expect_json 'j["class_names"]' "['a', 'b']" "--force replaced the class names"
check "no ds.old left after --force" test ! -e ds.old
sat verify ds
expect_rc 0 "replaced dataset verifies"

mkdir notds
echo "precious" >notds/notes.txt
mkdir notds/sub && echo "keep" >notds/sub/x
BEFORE=$(tree_sum notds)
sat pack folder "$PHOTOS" notds --force -q
expect_rc 2 "pack --force onto a non-dataset directory"
expect_err "not a saturate dataset" "non-dataset refusal message"
check "non-dataset directory untouched" test "$(tree_sum notds)" = "$BEFORE"
check "no manifest written into the non-dataset dir" test ! -e notds/manifest.json
sat pack folder "$PHOTOS" notds -q
expect_rc 2 "pack onto a non-dataset directory without --force"
check "non-dataset directory untouched (no --force)" test "$(tree_sum notds)" = "$BEFORE"
echo "a file" >afile
sat pack folder "$PHOTOS" afile --force -q
expect_rc 2 "pack --force onto a regular file"
check "regular file untouched" test "$(cat afile)" = "a file"
mkdir emptyout
sat pack folder two emptyout -q
expect_rc 0 "pack into an existing empty directory"
sat verify emptyout
expect_rc 0 "pack into an empty directory verifies"

# ---- bad inputs ---------------------------------------------------------------------------
section "corrupt JPEG, --skip-bad"
cp -r "$PHOTOS" badphotos
BADJPG=$(find badphotos -name '*.jpg' | sort | sed -n 5p)
BADSIZE=$(stat -c %s "$BADJPG")
truncate -s $((BADSIZE / 2)) "$BADJPG"
BADNAME=$(basename "$(dirname "$BADJPG")")/$(basename "$BADJPG")
sat pack folder badphotos bad -q
expect_rc_nonzero "pack with a truncated JPEG"
expect_err "$BADNAME" "error names the truncated JPEG"
check "no OUT dir after a failed pack" test ! -e bad
check "no OUT/manifest.json after a failed pack" test ! -e bad/manifest.json
check "no OUT.partial after a failed pack" test ! -e bad.partial
sat pack folder badphotos bad -q -j 1
expect_rc_nonzero "pack -j 1 with a truncated JPEG"
check "no OUT dir after a failed pack (-j 1)" test ! -e bad
sat pack folder badphotos bad --skip-bad -q
expect_rc 0 "pack --skip-bad"
expect_out "skipped 1" "--skip-bad summary"
expect_out "packed 39 records" "--skip-bad record count"
expect_out "$BADNAME" "--skip-bad summary names the skipped file"
sat verify bad
expect_rc 0 "--skip-bad dataset verifies"
expect_out "39 records" "--skip-bad dataset has 39 records"
sat pack folder badphotos badj --skip-bad --json -q
expect_json 'j["skipped"]' 1 "--skip-bad --json skipped"
expect_json 'j["records"]' 39 "--skip-bad --json records"
# A file that is not an image at all, named .jpg.
mkdir -p notjpeg/c && echo "this is text" >notjpeg/c/fake.jpg
cp "$(find "$PHOTOS" -name '*.jpg' | head -1)" notjpeg/c/real.jpg
sat pack folder notjpeg nj -q
expect_rc_nonzero "pack with a text file named .jpg"
expect_err "fake.jpg" "error names the fake JPEG"
check "no OUT after the fake JPEG" test ! -e nj
# Everything bad: --skip-bad must not produce an empty dataset silently.
mkdir -p allbad/c && echo "x" >allbad/c/1.jpg && echo "y" >allbad/c/2.png
sat pack folder allbad ab --skip-bad -q
expect_rc 2 "pack --skip-bad with only bad images"
check "no OUT when every image is bad" test ! -e ab

section "empty / missing / non-image input folders"
mkdir emptyin
sat pack folder emptyin e -q
expect_rc 2 "pack an empty folder"
expect_err "no .jpg/.jpeg/.png images" "empty folder message"
check "no OUT for an empty folder" test ! -e e
sat pack folder does-not-exist e -q
expect_rc 2 "pack a missing folder"
expect_err "does-not-exist" "missing folder message names it"
check "no OUT for a missing folder" test ! -e e
mkdir -p txtonly/cls && echo "hello" >txtonly/cls/readme.txt
sat pack folder txtonly e -q
expect_rc 2 "pack a class folder holding only a .txt"
expect_err "no .jpg/.jpeg/.png images" "txt-only message"
check "no OUT for a txt-only folder" test ! -e e
mkdir -p mixed/cls && cp -r two/a mixed/ && echo "hello" >mixed/cls/readme.txt
cp two/a/*.jpg mixed/cls/
sat pack folder mixed mx -q
expect_rc 0 "pack a folder with images and a .txt"
expect_out "ignored 1 non-image file" "ignored file counted in summary"

# ---- pack table -------------------------------------------------------------------------
section "pack table (CSV, JSONL)"
mapfile -t IMGS < <(cd "$PHOTOS" && find . -name '*.jpg' | sed 's|^\./||' | sort | head -6)
{
  echo "path,label,score,caption,count"
  i=0
  for p in "${IMGS[@]}"; do
    echo "train/$p,${p%%/*},0.$((i + 1))5,\"photo, number $i\",$((i * 10))"
    i=$((i + 1))
  done
} >photos/table.csv
sat pack table photos/table.csv tcsv -q
expect_rc 0 "pack table CSV"
expect_out "packed 6 records" "pack table CSV summary"
sat inspect tcsv
expect_rc 0 "inspect table CSV"
expect_out "score: float32" "CSV real column kept as float32"
expect_out "caption: bytes" "CSV text column kept as bytes"
expect_out "count: int64" "CSV integer column kept as int64"
expect_out "label: int64" "CSV label column"
expect_out "photo, number 0" "CSV quoted text in the sample record"
sat inspect tcsv --json
expect_json 'j["class_names"]' \
  "$(printf '%s\n' "${IMGS[@]}" | cut -d/ -f1 | sort -u | python3 -c 'import sys; print([l.strip() for l in sys.stdin])')" \
  "CSV class-name labels become sorted class names"
expect_json 'j["sample"]["count"]["value"]' 0 "CSV record 0 count"
sat verify tcsv
expect_rc 0 "verify table CSV"

{
  i=0
  for p in "${IMGS[@]}"; do
    echo "{\"file\": \"train/$p\", \"cls\": \"${p%%/*}\", \"w\": 1.5, \"note\": \"n$i\"}"
    i=$((i + 1))
  done
} >photos/table.jsonl
sat pack table photos/table.jsonl tjsonl --path-column file --label-column cls -q
expect_rc 0 "pack table JSONL"
expect_out "packed 6 records" "pack table JSONL summary"
sat inspect tjsonl
expect_out "w: float32" "JSONL real column"
expect_out "note: bytes" "JSONL text column"
sat verify tjsonl
expect_rc 0 "verify table JSONL"

sat pack table photos/table.csv tbad --path-column nosuchcol -q
expect_rc 2 "unknown --path-column"
expect_err "nosuchcol" "unknown --path-column is named"
check "no OUT for an unknown column" test ! -e tbad
sat pack table photos/table.csv tbad --label-column nosuchlabel -q
expect_rc 2 "unknown --label-column"
expect_err "nosuchlabel" "unknown --label-column is named"
sat pack table photos/table.jsonl tnolabel --path-column file --label-column "" -q
expect_rc 0 "pack table with --label-column ''"
sat inspect tnolabel --json
expect_json 'j["schema"]' "['image: image', 'cls: bytes', 'w: float32', 'note: bytes']" \
  "no label field without a label column; cls kept as text"
sat pack table photos/table.csv tnolabel2 --label-column "" -q
expect_rc 2 "--label-column '' while a column is named 'label'"
expect_err "clashes" "column named 'label' clash message"
{ head -3 photos/table.csv; echo "train/${CLASSES[0]}/missing-image.jpg,${CLASSES[0]},0.5,x,1"; } \
  >photos/missing.csv
sat pack table photos/missing.csv tmiss -q
expect_rc_nonzero "table row naming a missing image"
expect_err "missing-image.jpg" "missing image is named"
check "no OUT for a missing image" test ! -e tmiss
sat pack table photos/no-such-table.csv tmiss -q
expect_rc 2 "missing table file"
expect_err "no-such-table.csv" "missing table is named"
printf 'path,label\n' >photos/empty.csv
sat pack table photos/empty.csv tmiss -q
expect_rc 2 "table with a header and no rows"

# ---- pack idx -------------------------------------------------------------------------------
section "pack idx (Fashion-MNIST)"
FM_CLASSES="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"
sat pack idx "$FMNIST/t10k-images-idx3-ubyte.gz" "$FMNIST/t10k-labels-idx1-ubyte.gz" fm \
  --class-names "$FM_CLASSES" -q
expect_rc 0 "pack idx t10k"
expect_out "packed 10000 records" "pack idx t10k summary"
sat verify fm
expect_rc 0 "verify idx t10k"
expect_out "10000 records" "verify idx record count"
sat inspect fm
expect_rc 0 "inspect idx"
expect_out "image: uint8[28,28]" "inspect idx image shape"
expect_out "label: int64" "inspect idx label"
expect_out "Ankle boot" "inspect idx class names"
sat inspect fm --json
expect_json 'j["records"]' 10000 "inspect --json idx records"
expect_json 'len(j["class_names"])' 10 "inspect --json idx class count"
expect_json 'j["sample"]["image"]["elements"]' 784 "inspect --json idx sample"

sat pack idx "$FMNIST/t10k-images-idx3-ubyte.gz" "$FMNIST/t10k-labels-idx1-ubyte.gz" fm2 \
  --class-names "a,b,c" -q
expect_rc 2 "--class-names not covering every label"
check "no OUT for too few class names" test ! -e fm2
sat pack idx "$FMNIST/t10k-labels-idx1-ubyte.gz" "$FMNIST/t10k-labels-idx1-ubyte.gz" fm2 -q
expect_rc_in "2 3" "labels file passed as images"
expect_err "3-D" "labels-as-images message"
check "no OUT for labels-as-images" test ! -e fm2
printf 'this is certainly not an IDX file, just some text\n' >notidx
sat pack idx notidx "$FMNIST/t10k-labels-idx1-ubyte.gz" fm2 -q
expect_rc_in "2 3" "random file as IDX images"
expect_err "magic" "random file message mentions magic"
expect_err "notidx" "random file message names the file"
sat pack idx "$FMNIST/t10k-images-idx3-ubyte.gz" notidx fm2 -q
expect_rc_in "2 3" "random file as IDX labels"
expect_err "magic" "random labels message mentions magic"
check "no OUT for a bad IDX" test ! -e fm2
sat pack idx "$FMNIST/train-images-idx3-ubyte.gz" "$FMNIST/t10k-labels-idx1-ubyte.gz" fm2 -q
expect_rc_nonzero "train images with t10k labels"
expect_err "60000" "count mismatch message gives the image count"
expect_err "10000" "count mismatch message gives the label count"
check "no OUT for mismatched counts" test ! -e fm2
head -c 100000 "$FMNIST/t10k-images-idx3-ubyte.gz" >trunc.gz
sat pack idx trunc.gz "$FMNIST/t10k-labels-idx1-ubyte.gz" fm2 -q
expect_rc_in "2 3" "truncated gzip IDX"
expect_err "trunc.gz" "truncated gzip message names the file"
check "no OUT for a truncated gzip" test ! -e fm2
sat pack idx "$FMNIST/no-such-images.gz" "$FMNIST/t10k-labels-idx1-ubyte.gz" fm2 -q
expect_rc 2 "missing IDX file"
expect_err "no-such-images.gz" "missing IDX file named"

# ---- verify catches corruption ----------------------------------------------------------------
section "verify catches corruption"
sat pack folder "$PHOTOS" vds -q
expect_rc 0 "pack for corruption tests"
SHARD=$(python3 -c 'import json; print(json.load(open("vds/manifest.json"))["shards"][0]["file"])')
SIZE=$(stat -c %s "vds/$SHARD")
cp "vds/$SHARD" shard.orig
SEED=${SATURATE_E2E_SEED:-$RANDOM}
echo "corruption offsets seed: $SEED (set SATURATE_E2E_SEED to repeat)"
OFFSETS=$(python3 -c 'import random,sys; r=random.Random(int(sys.argv[1])); n=int(sys.argv[2]);
print(" ".join(str(x) for x in sorted(set([0, n - 1] + [r.randrange(n) for _ in range(18)]))))' \
  "$SEED" "$SIZE")
flip_byte() {  # flip_byte FILE OFFSET: xor the byte with 0xff in place
  python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xFF]))' "$1" "$2"
}
NFLIP=0
for off in $OFFSETS; do
  NFLIP=$((NFLIP + 1))
  flip_byte "vds/$SHARD" "$off"
  sat verify vds -q
  expect_rc 1 "verify after flipping byte $off of $SHARD ($SIZE bytes)"
  expect_out "FAILED" "verify output after flipping byte $off"
  expect_out "$SHARD" "verify names the shard after flipping byte $off"
  cp shard.orig "vds/$SHARD"
done
sat verify vds -q --no-mmap
expect_rc 0 "verify after restoring the shard"
echo "flipped $NFLIP offsets"
flip_byte "vds/$SHARD" $((SIZE / 2))
sat verify vds -q --no-mmap
expect_rc 1 "verify --no-mmap after a byte flip"
expect_out "FAILED" "verify --no-mmap after a byte flip"
sat verify vds --json -q
expect_rc 1 "verify --json on corrupt data"
expect_valid_json "verify --json on corrupt data"
expect_json 'j["ok"]' False "verify --json ok on corrupt data"
expect_json 'j["problem_count"] >= 1' True "verify --json problem_count"
expect_json 'j["problems"][0]["file"]' "$SHARD" "verify --json names the shard"
cp shard.orig "vds/$SHARD"

truncate -s $((SIZE - 100)) "vds/$SHARD"
sat verify vds -q
expect_rc 1 "verify a truncated shard"
expect_out "FAILED" "verify a truncated shard"
expect_out "$SHARD" "truncated shard is named"
truncate -s $((SIZE + 10)) "vds/$SHARD"
sat verify vds -q
expect_rc 1 "verify a shard with trailing junk"
cp shard.orig "vds/$SHARD"
rm "vds/$SHARD"
sat verify vds -q
expect_rc 1 "verify a dataset with a missing shard"
expect_out "$SHARD" "missing shard is named"
cp shard.orig "vds/$SHARD"
mv vds/manifest.json manifest.saved
sat verify vds -q
expect_rc 1 "verify with manifest.json deleted"
expect_out "not a complete dataset" "deleted manifest message"
mv manifest.saved vds/manifest.json
sat verify vds -q
expect_rc 0 "verify after restoring the manifest"
sat verify no-such-dataset -q
expect_rc_nonzero "verify a missing path"

# ---- a killed pack leaves no complete-looking dataset -------------------------------------------------
section "kill -9 mid-pack"
INTERRUPTED=0
# Reading the gzip IDX takes ~0.5 s before OUT.partial appears; a 60000-record pack
# into 64KiB shards takes several seconds, so most of these land mid-write.
for delay in 0.05 0.4 0.8 1.2 2.0; do
  rm -rf killed killed.partial
  "$SAT" pack idx "$FMNIST/train-images-idx3-ubyte.gz" "$FMNIST/train-labels-idx1-ubyte.gz" killed \
    --shard-size 64KiB -j 1 -q >/dev/null 2>&1 &
  BG_PID=$!
  sleep "$delay"
  kill -9 "$BG_PID" 2>/dev/null
  wait "$BG_PID" 2>/dev/null
  BG_PID=
  if [[ -e killed ]]; then
    sat verify killed -q
    expect_rc 0 "killed after ${delay}s: OUT exists, so it must verify"
  else
    ok
    sat inspect killed
    expect_rc_nonzero "killed after ${delay}s: inspect of the missing OUT"
    sat verify killed -q
    expect_rc_nonzero "killed after ${delay}s: verify of the missing OUT"
  fi
  check "killed after ${delay}s: OUT.partial has no manifest.json" test ! -e killed.partial/manifest.json
  if [[ -e killed.partial ]]; then
    INTERRUPTED=$((INTERRUPTED + 1))
    sat inspect killed.partial
    expect_rc_nonzero "killed after ${delay}s: inspect OUT.partial"
    sat verify killed.partial -q
    expect_rc 1 "killed after ${delay}s: verify OUT.partial"
    expect_out "not a complete dataset" "killed after ${delay}s: verify OUT.partial message"
  fi
done
echo "$INTERRUPTED of 5 packs were killed mid-way"
# Killing a --force pack that replaces a dataset leaves the old (or the new) one, complete.
for delay in 0.8 1.5; do
  rm -rf fk fk.partial fk.old
  "$SAT" pack idx "$FMNIST/t10k-images-idx3-ubyte.gz" "$FMNIST/t10k-labels-idx1-ubyte.gz" fk -q \
    >/dev/null 2>&1
  "$SAT" pack idx "$FMNIST/train-images-idx3-ubyte.gz" "$FMNIST/train-labels-idx1-ubyte.gz" fk \
    --force --shard-size 64KiB -j 1 -q >/dev/null 2>&1 &
  BG_PID=$!
  sleep "$delay"
  kill -9 "$BG_PID" 2>/dev/null
  wait "$BG_PID" 2>/dev/null
  BG_PID=
  sat verify fk --json -q
  expect_rc 0 "--force pack killed after ${delay}s: OUT still verifies"
  expect_json 'j["records_checked"] in (10000, 60000)' True \
    "--force pack killed after ${delay}s: OUT is the old or the new dataset"
done
# A later pack over the leftovers of a killed one succeeds.
"$SAT" pack folder "$PHOTOS" killed2 --shard-size 64KiB -j 1 -q >/dev/null 2>&1 &
BG_PID=$!
sleep 0.1
kill -9 "$BG_PID" 2>/dev/null
wait "$BG_PID" 2>/dev/null
BG_PID=
rm -rf killed2
sat pack folder "$PHOTOS" killed2 --shard-size 64KiB -q
expect_rc 0 "pack after a killed pack"
check "no killed2.partial after a good pack" test ! -e killed2.partial
sat verify killed2 -q
expect_rc 0 "verify the pack made after a killed one"
expect_out "40 records" "pack after a killed pack has all records"

# ---- bench feed ------------------------------------------------------------------
section "bench feed"
sat bench feed --help
expect_rc 0 "bench feed --help"
expect_out "--transform" "bench feed --help lists --transform"
sat bench feed killed2 --batch 8 --epochs 2 --warmup 1 --threads 2 \
  -t image:crop=random,size=64,flip=0.5,dtype=float32,normalize --json
expect_rc 0 "bench feed on the photo set"
expect_json 'j["samples"] + 8 * j["warmup_batches"]' 80 "bench feed counts every sample of 2 epochs"
expect_json 'j["threads"]' 2 "bench feed reports its threads"
expect_json 'all(k in j for k in ["images_per_s", "batches", "prefetch", "wait_ns_total", "elapsed_s"])' \
  True "bench feed JSON keys"
sat bench feed killed2 --batch 8 --threads 1 --digest --json -t image:crop=random,size=32
expect_rc 0 "bench feed --digest with 1 thread"
digest1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$OUT")
sat bench feed killed2 --batch 8 --threads 3 --digest --json -t image:crop=random,size=32
expect_json 'j["digest"]' "$digest1" "bench feed digest is the same for 1 and 3 threads"
sat bench feed killed2 --batch 8 --threads 3 --digest --json --seed 1 -t image:crop=random,size=32
expect_json 'j["digest"] != "'"$digest1"'"' True "bench feed digest changes with the seed"
sat bench feed killed2 -t image:size=banana
expect_rc 2 "bench feed with a bad transform"
expect_err "option 'size'" "bench feed names the bad option"
sat bench feed killed2 --threads zero
expect_rc 2 "bench feed with a bad --threads"
sat bench feed notds
expect_rc 2 "bench feed on a non-dataset"
sat bench feed killed2 --device gpu0
expect_rc 2 "bench feed with a bad --device"
expect_err "gpu0" "bench feed names the bad device"
if "$SAT" devices 2>/dev/null | grep -q "^gpu: none"; then  # no GPU here: a clear refusal
  sat bench feed killed2 --device cuda
  expect_rc 2 "bench feed --device cuda without a GPU"
  expect_err "unavailable: cuda:0" "bench feed --device cuda says why"
fi

# ---- inspect on things that are not datasets ---------------------------------------------------------
section "inspect non-datasets"
sat inspect notds
expect_rc 2 "inspect a non-dataset directory"
expect_err "not a saturate dataset" "inspect non-dataset message"
sat inspect emptyin
expect_rc 2 "inspect an empty directory"
expect_err "not a saturate dataset" "inspect empty dir message"
sat inspect no-such-dir
expect_rc_nonzero "inspect a missing directory"
sat verify notds -q
expect_rc 1 "verify a non-dataset directory"

summary
