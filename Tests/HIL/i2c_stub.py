#!/usr/bin/env python3
"""Sets registers of an `i2c-stub` chip through /dev/i2c-N, with the standard library only.

i2c-stub answers SMBus transfers only (a plain write() on /dev/i2c-N fails), so this uses the
I2C_SMBUS ioctl with byte-data writes, as i2cset does. Once a kernel driver is bound to the
address, I2C_SLAVE is refused (EBUSY) and I2C_SLAVE_FORCE is used, as `i2cset -f` does.

    i2c_stub.py BUS ADDR set REG VAL [REG VAL ...]
    i2c_stub.py BUS ADDR lis3dh X Y Z      a LIS3DH's axes, in counts of 1 mg (±2 g: -2048…2047)

The LIS3DH driver (st_accel) reads with the auto-increment bit set, so the axes are written at
0xa8-0xad (0x28-0x2d | 0x80): 12-bit values shifted left by 4, little-endian.
"""
import ctypes
import errno
import fcntl
import os
import sys

I2C_SLAVE = 0x0703
I2C_SLAVE_FORCE = 0x0706
I2C_SMBUS = 0x0720
I2C_SMBUS_WRITE = 0
I2C_SMBUS_BYTE_DATA = 2


class Data(ctypes.Union):
    _fields_ = [("byte", ctypes.c_uint8), ("word", ctypes.c_uint16), ("block", ctypes.c_uint8 * 34)]


class Request(ctypes.Structure):
    _fields_ = [("read_write", ctypes.c_uint8), ("command", ctypes.c_uint8), ("size", ctypes.c_uint32),
                ("data", ctypes.POINTER(Data))]


def write_byte(fd, register, value):
    data = Data()
    data.byte = value
    fcntl.ioctl(fd, I2C_SMBUS, Request(I2C_SMBUS_WRITE, register, I2C_SMBUS_BYTE_DATA, ctypes.pointer(data)))


def main():
    bus, address, op, *values = sys.argv[1:]
    fd = os.open(f"/dev/i2c-{int(bus)}", os.O_RDWR)
    try:
        fcntl.ioctl(fd, I2C_SLAVE, int(address, 0))
    except OSError as error:
        if error.errno != errno.EBUSY:
            raise
        fcntl.ioctl(fd, I2C_SLAVE_FORCE, int(address, 0))
    if op == "set":
        pairs = [(int(r, 0), int(v, 0)) for r, v in zip(values[0::2], values[1::2])]
    elif op == "lis3dh":
        pairs = []
        for i, count in enumerate(values[:3]):
            word = (max(-2048, min(2047, int(count))) << 4) & 0xFFFF
            pairs += [(0xA8 + 2 * i, word & 0xFF), (0xA9 + 2 * i, word >> 8)]
    else:
        sys.exit(f"unknown operation {op}")
    for register, value in pairs:
        write_byte(fd, register, value)


main()
