/* hex.h: the value of one hexadecimal digit. */
#ifndef TACO_HEX_H
#define TACO_HEX_H

/* 0..15 for '0'-'9', 'a'-'f', 'A'-'F'; -1 for anything else. */
static inline int taco_hex_value(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

#endif
