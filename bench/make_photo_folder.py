#!/usr/bin/env python3
"""Builds an ImageNet-like image folder of JPEGs from real photographs, for bench/input_pipeline.sh.

The photographs are the nature wallpapers of Debian's mate-backgrounds package
(/usr/share/backgrounds/mate/nature/*.jpg: flowers, grass, a ladybird, rain drops, a storm, wood;
1280x1024 to 2560x1920). Each photograph is one class; every sample is a different crop of it
(a random part of 20% to 100% of the photo's area, at the output's aspect ratio, sometimes
mirrored) resized with PIL's Lanczos filter to ImageNet's typical sizes (500x375 mostly, some
500x333, 500x400 and portrait 375x500) and saved as a baseline JPEG at quality 90 with 4:2:0
chroma, as most photographs are stored. The same --seed gives the same files.

    /usr/bin/python3 bench/make_photo_folder.py OUT [--train-per-class 32] [--val-per-class 8]

writes OUT/train/CLASS/NNNN.jpg and OUT/val/CLASS/NNNN.jpg (torchvision's ImageFolder layout).
Needs python3-pil and mate-backgrounds (scripts/setup.sh installs both).
"""
import argparse
import pathlib
import random
import sys

from PIL import Image

PHOTO_DIR = pathlib.Path("/usr/share/backgrounds/mate/nature")
# (width, height) and how often each appears, roughly as in ImageNet's training set.
SIZES = [((500, 375), 6), ((500, 333), 2), ((500, 400), 1), ((375, 500), 3)]


def photographs(folder):
    photos = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    if not photos:
        sys.exit(f"make_photo_folder: no photographs in {folder}; install mate-backgrounds (scripts/setup.sh)")
    return photos


def random_crop(photo, size, rng):
    """A random part of `photo` at the aspect ratio of `size`, 20% to 100% of the largest such part."""
    width, height = size
    aspect = width / height
    full_w = min(photo.width, round(photo.height * aspect))
    full_h = round(full_w / aspect)
    scale = rng.uniform(0.2, 1.0) ** 0.5
    crop_w, crop_h = max(width // 2, round(full_w * scale)), max(height // 2, round(full_h * scale))
    left = rng.randint(0, photo.width - crop_w)
    top = rng.randint(0, photo.height - crop_h)
    image = photo.crop((left, top, left + crop_w, top + crop_h)).resize(size, Image.LANCZOS)
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    return image


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="folder to create (must not exist or be empty)")
    parser.add_argument("--photos", type=pathlib.Path, default=PHOTO_DIR, help="folder of source photographs")
    parser.add_argument("--train-per-class", type=int, default=32)
    parser.add_argument("--val-per-class", type=int, default=8)
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"make_photo_folder: {args.out} is not empty")
    rng = random.Random(args.seed)
    sizes = [size for size, weight in SIZES for _ in range(weight)]
    photos = photographs(args.photos)
    count = 0
    for path in photos:
        photo = Image.open(path).convert("RGB")
        cls = path.stem.lower()
        for split, n in (("train", args.train_per_class), ("val", args.val_per_class)):
            folder = args.out / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                image = random_crop(photo, rng.choice(sizes), rng)
                image.save(folder / f"{i:04d}.jpg", quality=args.quality, subsampling="4:2:0")
                count += 1
    print(f"make_photo_folder: {count} JPEGs of {len(photos)} classes from {args.photos} in {args.out}")


if __name__ == "__main__":
    main()
