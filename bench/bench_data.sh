# Sourced by the bench scripts: makes (once) and packs the benchmark datasets
# in $data and warms the page cache. Needs: root, data, sat (the saturate
# binary). Sets: photos, and photos_count, fmnist_dir, fmnist_classes where
# the script has not.
: "${photos_count:=3000}"
: "${fmnist_dir:=/usr/share/datasets/fashion-mnist}"
: "${fmnist_classes:=T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot}"
echo "== datasets ($data)"
mkdir -p "$data"
photos=$data/photos
have=0  # (find on a missing folder fails, and pipefail would end the script)
if [[ -d $photos/train ]]; then have=$(find "$photos/train" -name '*.jpg' | wc -l); fi
if [[ $have != "$photos_count" ]]; then
  echo "making $photos_count photos in $photos (found $have)"
  "$root/scripts/make-photo-dataset" "$photos" --train "$photos_count" --val 0 --force
fi
# Packed on every run (a few seconds), so the dataset is in this build's
# format: JPEGs restart-marked for the loader's cut decode (pack --help).
"$sat" pack folder "$photos/train" "$data/photos.sat" --force -q
if ! "$sat" inspect "$data/fmnist.sat" >/dev/null 2>&1; then
  "$sat" pack idx "$fmnist_dir/train-images-idx3-ubyte.gz" "$fmnist_dir/train-labels-idx1-ubyte.gz" \
    "$data/fmnist.sat" --class-names "$fmnist_classes" --force -q
fi
# Warm the page cache, so neither side pays for the first read from disk.
cat "$photos"/train/*/*.jpg "$data"/photos.sat/* "$data"/fmnist.sat/* >/dev/null

